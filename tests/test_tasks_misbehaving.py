"""A task harms only itself (issue 39), proven with real worker processes
on the real broker (RabbitMQ, or Redis with NIGHTJAR_TEST_TRANSPORT=redis):
a body that exits or raises KeyboardInterrupt is its own failure and the
worker goes on; a body that kills its process is charged alone; a body
past its time limit is stopped and rolled back; a live worker keeps its
delivery however long the body runs; on SQLite a guest never gets a 500
because a task holds the write lock. The tasks are tests/task_functions.py."""

import signal
import threading
import time

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client

from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked
from tests import task_functions as tasks
from tests.helpers import register_by_form
from tests.test_tasks_broker import TASKS

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def tasks_queue(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE}


@pytest.mark.parametrize(
    "how, mode",
    [(how, ()) for how in ("SystemExit", "exit", "sys.exit", "KeyboardInterrupt")]
    + [("SystemExit", ("--batch", "10"))],
)
def test_a_task_that_exits_is_its_own_failure_and_the_worker_goes_on(how, mode, workers):
    exiting = tasks.exit_with.enqueue(how)
    after = tasks.add.enqueue(2, 3)
    worker = workers.start(*TASKS, "--serve", *mode)
    worker.wait_for(f"Received task {after.id}")
    worker.wait_for("Handler returned.")
    exiting.refresh()
    after.refresh()
    assert exiting.status == TaskResultStatus.FAILED  # max_attempts 1: failed and parked at once
    assert how.replace("exit", "SystemExit") in exiting.errors[-1].traceback or how in exiting.errors[-1].traceback
    assert (after.status, after.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert TaskParked.objects.filter(task_id=exiting.id).count() == 1
    worker.signal(signal.SIGTERM)  # the worker's own signal still stops it as before
    status, output = worker.finish()
    assert status == 0, output


def test_ctrl_c_to_the_worker_while_a_body_runs_still_interrupts_it_and_charges_nothing(workers, tmp_path):
    runs = tmp_path / "runs"
    slow = tasks.slow_run.enqueue("interrupted", 30, str(runs))
    worker = workers.start(*TASKS)
    worker.wait_for(f"Received task {slow.id}")
    while not runs.exists():  # the body runs
        worker.read_so_far()
        time.sleep(0.05)
    worker.signal(signal.SIGINT)  # a real Ctrl+C: the worker's own, not the task's
    status, output = worker.finish()
    assert status == 130, output
    slow.refresh()
    assert (slow.status, slow.errors) == (TaskResultStatus.READY, [])  # rolled back, not the task's failure
    assert not Group.objects.filter(name="interrupted").exists()


def test_a_stuck_task_is_stopped_rolled_back_retried_then_failed_and_the_next_runs(workers, worker_env):
    stuck = tasks.stuck.enqueue("stuck", "sleep")  # time_limit 1 s, max_attempts 2, backoff 0
    worker = workers.start(*TASKS, "--serve", "--reconcile-every", "0.5")
    after = tasks.add.enqueue(1, 1)
    worker.wait_for(f"Received task {after.id}")
    worker.wait_for("Handler returned.")
    for _ in range(2):
        stuck.refresh()
        if stuck.status == TaskResultStatus.FAILED:
            break
        worker.wait_for(f"Received task {stuck.id}")
        worker.wait_for("Handler returned.")
    stuck.refresh()
    assert stuck.status == TaskResultStatus.FAILED
    assert [error.traceback.strip().splitlines()[-1] for error in stuck.errors] == [
        "nightjar_tasks.limits.TimeLimitExceeded: timed out after 1 s"
    ] * 2
    assert not Group.objects.filter(name="stuck").exists()  # each attempt rolled back
    after.refresh()
    assert after.status == TaskResultStatus.SUCCESSFUL
    worker.signal(signal.SIGTERM)
    assert worker.finish()[0] == 0


def test_on_sqlite_guests_registering_while_a_task_holds_the_write_lock_get_no_500(workers, tmp_path):
    assert connection.vendor == "sqlite"  # (SQLite's one write lock: PostgreSQL locks rows)
    started = tmp_path / "started"
    holding = tasks.hold_the_lock.enqueue("holding", str(started))  # sleeps an hour, default time limit
    worker = workers.start(*TASKS, "--serve")
    while not started.exists():  # the body runs: its transaction holds the lock from BEGIN
        worker.read_so_far()
        time.sleep(0.05)
    answers = []

    def guest(name):
        client = Client(raise_request_exception=False)
        answers.append(register_by_form(client, name).status_code)

    guests = [threading.Thread(target=guest, args=(f"Guest {n}",)) for n in range(3)]
    for thread in guests:
        thread.start()
    for thread in guests:
        thread.join()
    assert sorted(answers) == [302, 302, 302]
    holding.refresh()
    assert holding.status == TaskResultStatus.FAILED
    assert "timed out after 10 s" in holding.errors[-1].traceback  # half of settings.py's busy timeout (20 s)
    assert not Group.objects.filter(name="holding").exists()
    worker.signal(signal.SIGTERM)
    assert worker.finish()[0] == 0
