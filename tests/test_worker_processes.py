"""`worker --serve --processes N` (nightjar_delivery/supervisor.py), proven
with real processes on the real broker: the children consume, each writes its
own workers-table row, a child killed with SIGKILL is started again and its
task runs again once (its death charged to it as any worker's), and SIGTERM
to the parent stops every child and exits 0."""

import os
import re
import signal
import time

import pytest
from django.contrib.auth.models import Group

from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskRecord, TaskWorkerReport
from tests import task_functions as tasks
from tests.helpers import until
from tests.test_tasks_broker import TASKS

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]

SERVE = (*TASKS, "--serve", "--processes", "2")


@pytest.fixture(autouse=True)
def tasks_queue(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE, "NIGHTJAR_WORKER_REPORT_SECONDS": "1"}


def child_pids(parent, count: int = 2) -> dict[int, int]:
    """slot -> pid of the latest start of each child the parent said it started."""
    pids: dict[int, int] = {}
    while len(pids) < count:
        line = parent.wait_for("started (pid")
        slot, pid = re.search(r"Worker process (\d+) started \(pid (\d+)\)", line).groups()
        pids[int(slot)] = int(pid)
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_processes_consume_report_a_row_each_and_stop_on_sigterm(workers):
    parent = workers.start(*SERVE)
    pids = child_pids(parent)
    results = [tasks.insert_row.enqueue(f"row {n}") for n in range(6)]
    until(
        lambda: (
            TaskRecord.objects.filter(pk__in=[r.id for r in results], status=TaskResultStatus.SUCCESSFUL).count() == 6
        ),
        what="the six tasks",
    )
    until(lambda: TaskWorkerReport.objects.filter(pid__in=pids.values(), stopped=None).count() == 2, what="two rows")
    assert parent.proc.pid not in TaskWorkerReport.objects.values_list("pid", flat=True)  # the parent takes nothing

    parent.signal(signal.SIGTERM)
    status, output = parent.finish(timeout=30)
    assert status == 0, output
    assert not any(alive(pid) for pid in pids.values()), output
    assert "All worker processes stopped." in output
    # Each child stopped as a worker does: its row says so.
    assert TaskWorkerReport.objects.filter(pid__in=pids.values()).exclude(stopped=None).count() == 2
    assert sorted(Group.objects.values_list("name", flat=True)) == [f"row {n}" for n in range(6)]


def test_a_killed_child_is_started_again_and_its_task_runs_once_more(workers, tmp_path):
    runs = tmp_path / "runs"
    parent = workers.start(*SERVE)
    pids = child_pids(parent)
    slow = tasks.run_noting_pid.enqueue("slow", 3, str(runs))
    until(lambda: runs.exists() and runs.read_text().strip(), what="the task to start")
    victim = int(runs.read_text().split()[1])
    slot = next(slot for slot, pid in pids.items() if pid == victim)
    os.kill(victim, signal.SIGKILL)
    parent.wait_for(f"Worker process {slot} (pid {victim}) was killed by SIGKILL")
    restarted = child_pids(parent, 1)[slot]
    assert restarted != victim

    until(lambda: TaskRecord.objects.get(pk=slow.id).status == TaskResultStatus.SUCCESSFUL, what="the task's rerun")
    assert len(runs.read_text().splitlines()) == 2  # killed once, run again once
    assert list(Group.objects.values_list("name", flat=True)) == ["slow"]  # its write: once
    assert alive(restarted)
    parent.signal(signal.SIGTERM)
    status, output = parent.finish(timeout=30)
    assert status == 0, output
    assert "redelivered=True" in output  # the broker gave the killed child's delivery back


def test_sigterm_kills_a_child_still_running_past_the_stop_bound(workers, worker_env, tmp_path):
    """A body longer than NIGHTJAR_WORKER_STOP_SECONDS: the parent kills its
    child at the bound (as systemd would at TimeoutStopSec) and exits 0."""
    runs = tmp_path / "runs"
    parent = workers.start(*SERVE, env={**worker_env, "NIGHTJAR_WORKER_STOP_SECONDS": "2"})
    pids = child_pids(parent)
    tasks.run_noting_pid.enqueue("long", 50, str(runs))
    until(lambda: runs.exists() and runs.read_text().strip(), what="the task to start")
    started = time.monotonic()
    parent.signal(signal.SIGTERM)
    status, output = parent.finish(timeout=30)
    assert status == 0, output
    assert time.monotonic() - started < 20, output
    assert "did not stop within 2 s; killing it." in output
    assert not any(alive(pid) for pid in pids.values()), output


@pytest.mark.parametrize(
    "args",
    [
        (*TASKS, "--processes", "2"),
        (*TASKS, "--serve", "--processes", "2", "--pause", "before-write"),
        (*TASKS, "--serve", "--processes", "2", "--crash", "before-write"),
    ],
    ids=["without-serve", "pause", "crash"],
)
def test_processes_refuses_what_one_worker_alone_can_do(workers, args):
    result = workers.run(*args)
    assert result.returncode == 2, result.stderr
    assert "--processes" in result.stderr
