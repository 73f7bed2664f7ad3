"""The Django Tasks backend's promises, proven with the real broker (RabbitMQ,
or Redis with NIGHTJAR_TEST_TRANSPORT=redis), on the test database (SQLite or
PostgreSQL), with `manage.py worker --channel tasks` as a real process killed
for real. The test tasks are tests/task_functions.py."""

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from nightjar_delivery import transport
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskRecord
from tests import task_functions as tasks
from tests.conftest import ROOT, TRANSPORT
from tests.helpers import MODES
from tickets.channel import RegistrationsChannel

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TASKS = ("--channel", "tasks")


@pytest.fixture(autouse=True)
def tasks_queue(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE}


def manage(env, *args) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "manage.py"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


# What the task's own writes are once the worker died at each checkpoint.
ROWS_AFTER_DEATH = {"before-write": 0, "inside-transaction": 0, "after-commit": 1}


@MODES
@pytest.mark.parametrize("checkpoint", list(ROWS_AFTER_DEATH))
def test_a_task_killed_at_each_window_writes_exactly_one_row(checkpoint, mode, workers):
    result = tasks.insert_row.enqueue("once")
    worker = workers.start(*TASKS, *mode, "--pause", checkpoint)
    worker.wait_for(f"Received task {result.id} redelivered=False")
    worker.wait_for(f"Paused {checkpoint}.")
    worker.signal(signal.SIGKILL)
    status, _ = worker.finish()
    assert status == -signal.SIGKILL
    assert Group.objects.count() == ROWS_AFTER_DEATH[checkpoint]

    rerun = workers.run(*TASKS, *mode)
    assert rerun.returncode == 0, rerun.stderr
    if checkpoint == "after-commit" and transport.kind() == "database":
        assert rerun.stdout.strip() == "No ready tasks"  # the ack (the row's DELETE) committed with the task
    else:
        assert f"Received task {result.id} redelivered=True" in rerun.stdout
    assert list(Group.objects.values_list("name", flat=True)) == ["once"]
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "once")
    assert workers.run(*TASKS).stdout.strip() == "No ready tasks"  # acked: nothing is left


def test_rolled_back_enqueue_runs_nothing_and_get_result_from_another_process(workers, worker_env):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.insert_row.enqueue("never")
        raise RuntimeError("rolled back")
    result = tasks.add.enqueue(2, 3)
    ran = workers.run(*TASKS, "--drain")
    assert ran.returncode == 0, ran.stderr
    assert f"Received task {result.id}" in ran.stdout and ran.stdout.count("Received") == 1
    assert Group.objects.count() == 0

    read = manage(
        worker_env,
        "shell",
        "--verbosity",
        "0",
        "-c",
        f"from tests.task_functions import add; r = add.get_result({result.id!r}); print(r.status, r.return_value)",
    )
    assert read.stdout.split() == ["SUCCESSFUL", "5"], read.stderr


# A process that enqueues and dies after its commit, before the publish: its
# own on_commit callback, registered first, runs first and ends the process.
DIES_AFTER_COMMIT = """
import os
from django.db import transaction
from tests.task_functions import insert_row
with transaction.atomic():
    transaction.on_commit(lambda: os._exit(9))
    print(insert_row.enqueue("after the crash").id, flush=True)
"""


def test_a_process_that_dies_after_the_enqueue_commit_leaves_a_task_reconcile_publishes(workers, worker_env):
    """enqueue() does not wait for the broker's confirm (issue 51): the row,
    committed in the caller's transaction, is what keeps the task. A caller
    gone between its commit and the publish leaves it READY, and reconcile
    publishes it: it runs once. On the database transport the message is a
    row of the caller's transaction (publish_on_commit): committed with the
    task, it runs without reconcile."""
    died = manage(worker_env, "shell", "--verbosity", "0", "-c", DIES_AFTER_COMMIT)
    assert died.returncode == 9, died.stderr
    task_id = died.stdout.strip()
    assert TaskRecord.objects.get(pk=task_id).status == TaskResultStatus.READY
    if TRANSPORT != "database":
        assert workers.run(*TASKS).stdout.strip() == "No ready tasks"  # never published
        reconciled = manage(worker_env, "reconcile", *TASKS, "--older-than", "0")
        assert reconciled.returncode == 0, reconciled.stderr
    ran = workers.run(*TASKS, "--drain")
    assert f"Received task {task_id} redelivered=False" in ran.stdout, ran.stdout
    assert TaskRecord.objects.get(pk=task_id).status == TaskResultStatus.SUCCESSFUL
    assert list(Group.objects.values_list("name", flat=True)) == ["after the crash"]


def test_a_command_that_enqueues_many_and_exits_leaves_every_task_published(worker_env, settings):
    """enqueue() returns before the broker's confirm (issue 51): at a normal
    exit the process first sends what its publisher thread still holds, so
    none of them waits for reconcile's grace period."""
    enqueued = manage(
        worker_env,
        "shell",
        "--verbosity",
        "0",
        "-c",
        "from tests.task_functions import add\nfor n in range(300): add.enqueue(n, n)",
    )
    assert enqueued.returncode == 0, enqueued.stderr
    assert "not published" not in enqueued.stderr
    assert transport.queue_counts(settings.NIGHTJAR_TASKS_QUEUE)["ready"] == 300


@pytest.mark.broker_service
@pytest.mark.parametrize("broker", ["down", "frozen"])
def test_enqueue_with_the_broker_stopped_runs_after_it_returns(broker, rabbit, workers, worker_env):
    with getattr(rabbit, broker)():
        # Returns (within NIGHTJAR_BROKER_TIMEOUT): the row is stored, the publish failed.
        result = tasks.insert_row.enqueue("later")
    assert TaskRecord.objects.get().status == TaskResultStatus.READY
    if broker == "down":
        assert workers.run(*TASKS).stdout.strip() == "No ready tasks"
    # (A frozen broker may still take the publish in flight once it thaws:
    # then reconcile's copy is a repeat, which runs nothing.)
    reconciled = manage(worker_env, "reconcile", *TASKS, "--older-than", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    assert workers.run(*TASKS, "--drain").returncode == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert Group.objects.filter(name="later").count() == 1


def test_a_failing_task_is_retried_failed_parked_requeued_and_then_succeeds(workers, worker_env):
    result = tasks.insert_when_fixed.enqueue("late")  # max_attempts 2, backoff 0
    assert workers.run(*TASKS).returncode == 0  # attempt 1 fails: recorded, acked, waits for its retry
    assert manage(worker_env, "reconcile", *TASKS).returncode == 0  # due at once: published again
    assert workers.run(*TASKS).returncode == 0  # attempt 2 fails: FAILED and parked
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2 and len(result.errors) == 2
    assert "RuntimeError: late is not fixed yet" in result.errors[-1].traceback
    assert Group.objects.count() == 0  # each failed attempt rolled back
    listed = manage(worker_env, "parked", *TASKS)
    assert f"task {result.id}" in listed.stdout, listed.stdout + listed.stderr

    Group.objects.create(name="fixed-late")
    requeued = manage(worker_env, "parked", *TASKS, "requeue", result.id)
    assert requeued.returncode == 0, requeued.stdout + requeued.stderr
    assert workers.run(*TASKS).returncode == 0
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "late")
    assert Group.objects.filter(name="late").count() == 1


def test_run_after_waits_until_due(workers, worker_env):
    result = tasks.insert_row.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("deferred")
    assert manage(worker_env, "reconcile", *TASKS, "--older-than", "0").returncode == 0
    assert workers.run(*TASKS).stdout.strip() == "No ready tasks"  # not published: not due
    TaskRecord.objects.update(run_after=timezone.now() - timedelta(seconds=1))
    assert manage(worker_env, "reconcile", *TASKS).returncode == 0
    assert workers.run(*TASKS).returncode == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_a_serving_tasks_worker_retries_without_being_told_a_reconcile_period(workers):
    """Issue 51: a retry waits READY for reconcile to publish it when due, so
    a tasks worker started with --serve and no --reconcile-every never
    retried anything. The tasks' channels give --serve a reconcile period of
    their own (5 s); the tickets' (the lab's) has none, its output unchanged."""
    failing = tasks.insert_when_fixed.enqueue("retried")  # max_attempts 2, backoff 0
    worker = workers.start(*TASKS, "--serve")
    worker.wait_for(f"Received task {failing.id} redelivered=False")
    worker.wait_for("Handler returned.")
    worker.wait_for("Reconcile republished 1", timeout=30)  # the retry, published by the worker's own pass
    worker.wait_for(f"Received task {failing.id} redelivered=False")
    worker.wait_for("Handler returned.")
    worker.signal(signal.SIGTERM)
    status, output = worker.finish()
    assert status == 0, output
    failing.refresh()
    assert (failing.status, failing.attempts) == (TaskResultStatus.FAILED, 2)  # retried once, then out of attempts
    assert RegistrationsChannel.serve_reconcile_every is None  # the lab's worker reconciles only when told


@pytest.mark.parametrize("with_key", [True, False], ids=["with-the-key", "without"])
def test_a_call_to_a_key_honouring_service_happens_once_when_its_worker_dies_after_it(workers, tmp_path, with_key):
    """The task calls the service, then its worker is killed -9 before the
    commit; the redelivery calls again. With nightjar_tasks.idempotency_key
    (the same on both attempts) the service applies it once; without, twice
    (docs/tasks.md says so): the task's own row is written once either way."""
    from devtools.keyserver import KeyServer

    with KeyServer() as service:
        result = tasks.charge_then_die_once.enqueue(service.url, str(tmp_path / "killed"), with_key)
        died = workers.run(*TASKS)
        assert died.returncode == -signal.SIGKILL, died.stdout + died.stderr
        rerun = workers.run(*TASKS)
        assert rerun.returncode == 0 and f"Received task {result.id} redelivered=True" in rerun.stdout, rerun.stderr
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert Group.objects.filter(name=f"charged-{result.id}").count() == 1
        if with_key:
            assert service.requests == [f"nightjar-task-{result.id}-charge"] * 2
            assert len(service.effects) == 1 and result.return_value == 1
        else:
            assert service.requests == [None, None] and len(service.effects) == 2
