"""Tasks the nightjar_tasks tests enqueue (no ticket code): each effect is a
row of django.contrib.auth's Group, whose name is unique."""

import contextlib

from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction

from nightjar_tasks import retry
from nightjar_tasks.compat import task


@task
def insert_row(name: str) -> str:
    Group.objects.create(name=name)
    return name


@task(takes_context=True)
def own_result(context, label: str) -> list:
    """What its TaskContext says: built even when no signal receiver would see a TaskResult."""
    result = context.task_result
    return [label, result.id, result.status, context.attempt, result.args]


@task
def add(a: int, b: int) -> int:
    return a + b


@task
@retry(max_attempts=2, backoff=0)
def insert_when_fixed(name: str) -> str:
    """Fails until a row named "fixed-<name>" exists, then inserts <name>."""
    Group.objects.create(name=f"attempt-{name}")  # rolled back with the failure
    if not Group.objects.filter(name=f"fixed-{name}").exists():
        raise RuntimeError(f"{name} is not fixed yet")
    Group.objects.create(name=name)
    return name


@task
@retry(atomic=False)
def insert_row_outside(name: str) -> str:
    Group.objects.create(name=name)
    return name


@task
def insert_then_rename_on_commit(name: str) -> str:
    """Inserts <name>; once the task's transaction commits, saves it again as
    "<name>-committed" (an UPDATE that Django's save() checks by its row count)."""
    group = Group.objects.create(name=name)

    def rename():
        group.name = f"{name}-committed"
        group.save()

    transaction.on_commit(rename)
    return name


@task
@retry(max_attempts=1)
def insert_then_swallow_a_duplicate(name: str) -> str:
    """Inserts <name>, then catches the IntegrityError of inserting it again
    without an atomic block of its own: Django marks the transaction for
    rollback, so <name> is never stored, and the task did not succeed."""
    Group.objects.create(name=name)
    with contextlib.suppress(IntegrityError):
        Group.objects.create(name=name)
    return name


@task
@retry(max_attempts=1)
def register_on_commit_then_fail(name: str) -> str:
    """An on_commit callback (it would insert <name>), then an error: the
    callback is rolled back with the body and never runs."""
    transaction.on_commit(lambda: Group.objects.create(name=name))
    raise RuntimeError(f"{name} fails after registering its callback")


# -- tasks that misbehave (issue 39): each harms only itself --


@task
@retry(max_attempts=1)
def exit_with(how: str) -> None:
    """Ends its process as a body can: SystemExit, exit(), sys.exit(), KeyboardInterrupt."""
    import sys

    if how == "SystemExit":
        raise SystemExit(3)
    if how == "exit":
        exit(4)
    if how == "sys.exit":
        sys.exit("bye")
    raise KeyboardInterrupt


@task
def die(status: int) -> None:
    """os._exit: the process dies with no cleanup (as a segfault or the OOM killer would)."""
    import os

    os._exit(status)


@task
@retry(max_attempts=2, backoff=0, time_limit=1)
def stuck(name: str, how: str) -> str:
    """Inserts <name>, then never returns by itself: a sleep, a busy loop,
    or a read from a socket nobody writes to (no timeout)."""
    import socket
    import time

    Group.objects.create(name=name)  # rolled back with the time-out
    if how == "sleep":
        time.sleep(3600)
    elif how == "busy":
        while True:
            pass
    elif how == "swallowing":
        try:  # noqa: SIM105 (the point: a body that catches everything)
            time.sleep(3600)
        except BaseException:  # swallowed, and the body returns: it still ran too long
            pass
    else:
        reader, writer = socket.socketpair()
        reader.recv(1)
    return name


@task
@retry(max_attempts=1)
def hold_the_lock(name: str, started_file: str) -> str:
    """Inserts <name> (on SQLite: the write lock held from BEGIN), says so in
    started_file, then sleeps an hour: only the time limit ends it."""
    import pathlib
    import time

    Group.objects.create(name=name)
    pathlib.Path(started_file).write_text("started\n")
    time.sleep(3600)
    return name


@task
@retry(time_limit=60)
def slow_run(name: str, seconds: float, runs_file: str) -> str:
    """Notes each run in runs_file (outside the database), inserts <name>,
    then sleeps: a body that outlives the broker's heartbeat and claim time."""
    import time

    with open(runs_file, "a") as runs:
        runs.write(f"{name}\n")
    Group.objects.create(name=name)
    time.sleep(seconds)
    return name


# -- bodies that take the alarm away or outlast it (issue 51): the watchdog's backstop --


def _own_timeout_recipe(seconds: int, call) -> None:
    """What timeout-decorator (and many a copied recipe) does around a call:
    its own SIGALRM handler and alarm, then alarm(0) and the old handler back."""
    import signal

    def expired(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@task
@retry(max_attempts=2, backoff=0, time_limit=1)
def escape(name: str, how: str, started_file: str) -> str:
    """Inserts <name>, says so in started_file, then never returns by itself
    and keeps the alarm from stopping it (how: one of ESCAPES)."""
    import pathlib
    import signal
    import time

    from django.db import connection

    Group.objects.create(name=name)  # rolled back with the attempt (on SQLite: the write lock held)
    pathlib.Path(started_file).write_text("started\n")
    if how == "alarm(0)":
        signal.alarm(0)
        time.sleep(3600)
    elif how == "own timeout":
        _own_timeout_recipe(30, lambda: time.sleep(0.1))
        time.sleep(3600)
    elif how == "SIG_IGN":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(3600)
    elif how == "except BaseException":
        while True:
            try:  # noqa: SIM105 (the point: a loop that swallows everything)
                time.sleep(3600)
            except BaseException:
                pass
    else:  # one statement that never ends: SQLite has no statement timeout
        with connection.cursor() as cursor:
            cursor.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
    return name


ESCAPES = ("alarm(0)", "own timeout", "SIG_IGN", "except BaseException", "recursive CTE")

ENDLESS_STATEMENT = (
    "WITH RECURSIVE endless(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM endless) SELECT count(*) FROM endless"
)


@task
@retry(max_attempts=1, time_limit=600)
def endless_statement(name: str, started_file: str) -> str:
    """Inserts <name>, says so in started_file, then runs one statement that
    never ends (its time limit far away: nothing stops it but the worker's end)."""
    import pathlib

    from django.db import connection

    Group.objects.create(name=name)  # the transaction holds its locks from here
    pathlib.Path(started_file).write_text("started\n")
    with connection.cursor() as cursor:
        cursor.execute(ENDLESS_STATEMENT)
    return name


@task
@retry(max_attempts=1)
def fork_and_exit(name: str) -> str:
    """Forks; the child calls sys.exit() (as a body's child would, by
    mistake or not); the parent waits for it, then inserts <name>."""
    import os
    import sys

    child = os.fork()
    if child == 0:
        sys.exit("the child is done")
    os.waitpid(child, 0)
    Group.objects.create(name=name)
    return name


@task
@retry(max_attempts=1)
def ignore_sigterm(name: str) -> str:
    """Sets SIGTERM (and SIGINT) to ignored, inserts <name>, and returns."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Group.objects.create(name=name)
    return name


@task
def hold_for(name: str, seconds: float, runs_file: str) -> str:
    """Inserts <name> (on SQLite: the write lock held from BEGIN), notes the
    run in runs_file, then sleeps: one of a queue of long tasks."""
    import time

    Group.objects.create(name=name)
    with open(runs_file, "a") as runs:
        runs.write(f"{name}\n")
    time.sleep(seconds)
    return name


def always_fails(name: str) -> str:
    """Not a task by itself: a test makes it one with the options it tries (@task(max_attempts=...))."""
    Group.objects.create(name=name)  # rolled back with the failure
    raise RuntimeError(f"{name} always fails")


@task(takes_context=True)
def charge_then_die_once(context, url: str, marker: str, with_key: bool) -> int:
    """Calls another service (with the task's idempotency key, or none), then
    its worker is SIGKILLed before the commit, once (marker: a file that says
    it happened); the redelivery calls again and writes its row."""
    import json
    import os
    import signal
    import urllib.request
    from pathlib import Path

    from nightjar_tasks import idempotency_key

    headers = {"Content-Type": "application/json"}
    if with_key:
        headers["Idempotency-Key"] = idempotency_key(context, "charge")
    request = urllib.request.Request(url, data=json.dumps({"amount": 5}).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        effect = json.loads(response.read())["effect"]
    if not Path(marker).exists():
        Path(marker).write_text("killed after the call")
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies between the call and its commit
    Group.objects.create(name=f"charged-{context.task_result.id}")
    return effect


@task
@retry(time_limit=60)
def run_noting_pid(name: str, seconds: float, runs_file: str) -> str:
    """Notes "<name> <pid>" in runs_file (which process runs it: a test kills
    that one), inserts <name>, then sleeps."""
    import os
    import time

    with open(runs_file, "a") as runs:
        runs.write(f"{name} {os.getpid()}\n")
    Group.objects.create(name=name)
    time.sleep(seconds)
    return name
