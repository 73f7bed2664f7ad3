"""A task harms only itself (issue 39), proven with real worker processes
on the real broker (RabbitMQ, or Redis with NIGHTJAR_TEST_TRANSPORT=redis):
a body that exits or raises KeyboardInterrupt is its own failure and the
worker goes on; a body that kills its process is charged alone; a body
past its time limit is stopped and rolled back; a live worker keeps its
delivery however long the body runs; on SQLite a guest never gets a 500
because a task holds the write lock. The tasks are tests/task_functions.py."""

import contextlib
import signal
import threading
import time

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test import Client

from nightjar_tasks import limits
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskFailure, TaskParked
from tests import task_functions as tasks
from tests.helpers import register_by_form, until
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
    # The lock is free once the body's transaction rolled back; the failure's record is a
    # transaction of the worker's after it, which may wait for the guests' writes.
    until(lambda: holding.refresh() or holding.status == TaskResultStatus.FAILED, what="the task FAILED", every=0.1)
    assert "timed out after 10 s" in holding.errors[-1].traceback  # half of settings.py's busy timeout (20 s)
    assert not Group.objects.filter(name="holding").exists()
    worker.signal(signal.SIGTERM)
    assert worker.finish()[0] == 0


@contextlib.contextmanager
def override_busy_timeout(seconds: float):
    """This process's SQLite busy timeout (for its next connection)."""
    options = connection.settings_dict["OPTIONS"]
    before = options.get("timeout")
    options["timeout"] = seconds
    try:
        yield
    finally:
        connection.close()
        options["timeout"] = before


def _wait_for_file(worker, path) -> None:
    """Until the body wrote path (reading the worker's output meanwhile)."""
    until(lambda: worker.read_so_far() is not None and path.exists(), what=f"{path.name} from the body", every=0.05)


@pytest.mark.parametrize(
    "how",
    [
        # (the statement on PostgreSQL too: what stops it there is psycopg's cancel)
        pytest.param(how, marks=[pytest.mark.postgres] if how == "recursive CTE" else [])
        for how in tasks.ESCAPES
    ],
)
def test_a_body_that_takes_its_alarm_away_is_stopped_by_the_watchdog_and_a_guest_still_registers(
    how, workers, tmp_path
):
    """Issue 51: the alarm is the body's to remove (alarm(0), a timeout recipe
    of its own, SIG_IGN), to swallow, or to outlast in one SQLite statement.
    The watchdog asks nothing of the body: past the limit and a grace it
    interrupts the statement (the attempt fails as timed out, the worker goes
    on), past a second grace it ends the worker (the transaction and the lock
    die with it; the broker redelivers). Either way a guest's write that
    waited for the lock meanwhile goes through. (Before: each ran 12-40 s
    and the guest got a 500 after the busy timeout, 20 s.)"""
    started = tmp_path / "started"
    escaping = tasks.escape.enqueue("escaping", how, str(started))  # time_limit 1 s
    worker = workers.start(*TASKS, "--serve")
    _wait_for_file(worker, started)  # the body runs, holding the write lock
    began = time.monotonic()
    answer = register_by_form(Client(raise_request_exception=False), "Guest during the escape")
    print(f"{how}: the guest waited {time.monotonic() - began:.2f} s")  # (the note's figures: -s)
    assert answer.status_code == 302
    if how == "recursive CTE":
        worker.wait_for("Handler returned.")
        escaping.refresh()
        assert "TimeLimitExceeded: timed out after 1 s" in escaping.errors[-1].traceback
        worker.signal(signal.SIGTERM)
        assert worker.finish()[0] == 0
    else:
        status, output = worker.finish()
        assert status == limits.STUCK_STATUS, output
        assert f"task {escaping.id} (tests.task_functions.escape) ran past its time limit of 1 s" in output
        escaping.refresh()
        assert (escaping.status, escaping.errors) == (TaskResultStatus.READY, [])  # the death: charged on redelivery
    assert not Group.objects.filter(name="escaping").exists()  # rolled back


def _statements_running(text: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query = %s AND pid <> pg_backend_pid()", [text]
        )
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.postgres
def test_a_worker_killed_while_a_bodys_statement_runs_leaves_no_statement_running_in_postgresql(workers, tmp_path):
    """A worker killed while its body's statement runs: PostgreSQL goes on
    running a statement whose client is gone until it ends by itself (it
    notices only when it writes to the client), holding the transaction's
    locks; one that never ends held them for good (seen in CI: the next
    test's TRUNCATE waited on it behind a worker that had stopped). The
    worker's connections ask the server to look for their client every
    second (client_connection_check_interval): the statement and its locks
    end within seconds of the worker."""
    if connection.vendor != "postgresql":
        pytest.skip("on SQLite the statement runs in the worker's own process and dies with it")
    started = tmp_path / "started"
    tasks.endless_statement.enqueue("endless", str(started))
    worker = workers.start(*TASKS, "--serve")
    try:
        _wait_for_file(worker, started)
        until(lambda: _statements_running(tasks.ENDLESS_STATEMENT), what="the body's statement in PostgreSQL")
        worker.signal(signal.SIGKILL)
        worker.finish()
        ended = time.monotonic() + 10
        while _statements_running(tasks.ENDLESS_STATEMENT) and time.monotonic() < ended:
            time.sleep(0.1)
        assert _statements_running(tasks.ENDLESS_STATEMENT) == [], "the statement outlived its worker by 10 s"
        with transaction.atomic(), connection.cursor() as cursor:  # and its locks went with it
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            cursor.execute("LOCK TABLE auth_group IN ACCESS EXCLUSIVE MODE")
    finally:  # never leave it running for the next test's TRUNCATE to wait on
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s AND pid <> pg_backend_pid()",
                [tasks.ENDLESS_STATEMENT],
            )


def test_a_body_s_forked_child_ends_with_the_body_and_records_acks_or_consumes_nothing(workers):
    """Issue 51: a child that calls sys.exit() was caught as the task's own
    failure, recorded through the parent's connection, acked on the parent's
    channel, and kept consuming. Now the child ends when the body is over;
    the parent alone records and acks."""
    forking = tasks.fork_and_exit.enqueue("forked")
    after = tasks.add.enqueue(2, 2)
    worker = workers.start(*TASKS, "--serve")
    worker.wait_for(f"Received task {after.id}")
    worker.wait_for("Handler returned.")
    worker.signal(signal.SIGTERM)
    status, output = worker.finish()
    assert status == 0, output
    forking.refresh()
    after.refresh()
    assert (forking.status, forking.return_value, forking.errors) == (TaskResultStatus.SUCCESSFUL, "forked", [])
    assert (after.status, after.return_value) == (TaskResultStatus.SUCCESSFUL, 4)
    assert not TaskFailure.objects.exists()
    assert list(Group.objects.values_list("name", flat=True)) == ["forked"]
    assert output.count(f"Received task {after.id}") == 1  # consumed by the worker alone
    assert output.count("Handler returned.") == 2


def test_a_body_that_ignores_sigterm_does_not_keep_its_worker_from_stopping(workers):
    """Issue 51: the worker's own SIGTERM and SIGINT handlers are put back
    after each body (before: SIG_IGN stayed, and systemctl stop waited for
    the unit's SIGKILL)."""
    ignoring = tasks.ignore_sigterm.enqueue("ignoring")
    worker = workers.start(*TASKS, "--serve")
    worker.wait_for(f"Received task {ignoring.id}")
    worker.wait_for("Handler returned.")
    worker.signal(signal.SIGTERM)
    status, output = worker.finish(timeout=15)
    assert status == 0, output
    assert "SIGTERM received" in output
    ignoring.refresh()
    assert ignoring.status == TaskResultStatus.SUCCESSFUL


def test_on_sqlite_guests_registering_during_a_queue_of_long_tasks_all_get_through(workers, worker_env, tmp_path):
    """Issue 51: SQLite's busy handler does not queue: a waiting write tries
    again after sleeps of up to 100 ms, and a worker that takes the lock back
    3-68 ms after each commit starves it (5 tasks of 8 s: a guest's 500 after
    the busy timeout). After holding the lock back to back, the worker now
    leaves it free longer than the handler's longest sleep. Here the busy
    timeout is 4 s (time limit 2 s) and 8 tasks of 1.6 s run back to back:
    guests register one after another all the while, and none fails."""
    assert connection.vendor == "sqlite"
    runs = tmp_path / "runs"
    queue = [tasks.hold_for.enqueue(f"long-{n}", 1.6, str(runs)) for n in range(8)]
    env = {**worker_env, "DATABASE_URL": worker_env["DATABASE_URL"] + "?timeout=4"}
    worker = workers.start(*TASKS, "--serve", env=env)
    until(lambda: worker.read_so_far() is not None and runs.exists(), what="the first long task", every=0.05)
    connection.close()  # the guests' connection waits 4 s too
    answers, waits = [], []
    with override_busy_timeout(4):
        while len(runs.read_text().splitlines()) < len(queue):
            began = time.monotonic()
            answers.append(register_by_form(Client(raise_request_exception=False), f"Guest {len(answers)}").status_code)
            waits.append(time.monotonic() - began)
    print(f"{len(answers)} guests, the longest wait {max(waits):.2f} s")  # (the note's figures: -s)
    assert set(answers) == {302}, answers
    worker.wait_for(f"Received task {queue[-1].id}")
    worker.signal(signal.SIGTERM)
    assert worker.finish()[0] == 0
    assert Group.objects.filter(name__startswith="long-").count() == len(queue)
