"""What a task's body may do to its worker: nothing beyond its own failure.

- Whatever the body raises, BaseException included (SystemExit, exit(),
  KeyboardInterrupt), is the task's failure (own_failure), except a
  KeyboardInterrupt the worker's own signal handler raised (a real Ctrl+C).
- A body past its time limit is stopped (time_limit): SIGALRM in the
  worker's main thread raises TimeLimitExceeded in the body, wherever it is;
  a body that takes the alarm away (`signal.alarm(0)`, a timeout recipe of
  its own, SIG_IGN), swallows it, or sits in one database statement meets
  the watchdog (Watchdog): its statement interrupted past the limit and a
  grace, its process ended past a second grace.
- A body that forks: the child ends when the body is over (Limit.__exit__).
- A body that changes the worker's SIGTERM or SIGINT handler: put back.

Why an alarm, and not a thread or a child process per task: a thread cannot
be stopped, and its body would run on another database connection, outside
the transaction that marks the task done; a child process per task costs a
fork (and a database connection) per task and cannot share the worker's
transaction either. A signal interrupts a sleep, a busy loop, and a blocking
socket read (PEP 475 retries an interrupted system call only when the
handler returns; ours raises), in the thread that holds the transaction, so
the rollback is the ordinary one. It costs a few µs per task (two
setitimer calls and a look at the handlers; bin/bench/tasks.py measures it).
What it cannot interrupt, the watchdog's backstop ends: a single C call that
never returns to Python, a body that removes or swallows the alarm. A body
that runs in a thread of its own is not stopped.
"""

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

# signal.getsignal() without its wrapper, which tries to make an enum of the
# handler (~2 µs per call, most of a task's alarm): the handler as it is.
if TYPE_CHECKING:  # typeshed describes no _signal: the wrapper's signature is the same
    from signal import getsignal as _handler_now
else:
    from _signal import getsignal as _handler_now

from django.db import DEFAULT_DB_ALIAS, connections

from nightjar_delivery import interrupted_by_signal

# When a task says nothing and its backend's OPTIONS say nothing.
DEFAULT_TIME_LIMIT = 300.0
# After the first alarm, again this often: a body that swallows the first
# (`except BaseException: pass`) is stopped at the next.
REPEAT_SECONDS = 0.5
# SQLite's busy timeout when the DATABASES entry gives none (Python's sqlite3).
SQLITE_DEFAULT_TIMEOUT = 5.0
# The watchdog's backstop (Watchdog): past the limit and GRACE, the body's statement is
# interrupted; past GRACE again, the worker ends with STUCK_STATUS (EX_SOFTWARE).
GRACE = 2.0
WATCH_EVERY = 0.25
STUCK_STATUS = 70
# SQLite's write lock shared with guests (LockShare): held this long back to back, most
# of the time, the worker leaves it free for longer than SQLite's busy handler sleeps (100 ms).
SHARE_BUDGET = 1.0
SHARE_DUTY = 0.9
SHARE_PAUSE = 0.15

logger = logging.getLogger(__name__)


class TimeLimitExceeded(BaseException):
    """Not an Exception: a body's own `except Exception` must not swallow it."""


def own_failure(error: BaseException) -> bool:
    """Whether what a body raised is that task's failure: anything, except
    a KeyboardInterrupt that came from a signal sent to the worker."""
    return not (isinstance(error, KeyboardInterrupt) and interrupted_by_signal())


def sqlite_lock_budget(alias: str) -> float | None:
    """On SQLite: the longest an atomic task may hold the write lock so that
    a guest's write, which waits up to the busy timeout, still gets it (half
    of it: the claim, the done-mark and the guest's own work fit in the
    rest). None on other databases (row locks: a task blocks no guest)."""
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return None
    return float(connection.settings_dict.get("OPTIONS", {}).get("timeout", SQLITE_DEFAULT_TIMEOUT)) / 2


_armed: "Limit | None" = None  # the Limit of the body running now, if any
# The main thread's connection of each alias (connections[alias] costs ~5 µs a task; the
# watchdog's thread has connections of its own, so it is handed the body's).
_main_connections: dict = {}
_disarming = threading.Lock()  # the watchdog acts on a body only while it is still the one armed


def _alarm(signum, frame):
    limit = _armed
    if limit is None:
        return  # an alarm left over from a body that ended: nothing to stop
    limit.expired = True
    raise TimeLimitExceeded(f"timed out after {limit.seconds:g} s")


class Limit:
    """Arm with `with Limit(seconds, alias, record):` around a body. The handler is
    installed once per process (signal.signal costs ~5 µs, a task's whole
    alarm ~3 µs), again only if a body replaced it. Outside the main thread
    (a worker run in a thread of its own), no signal can reach the body:
    then nothing is armed.

    Around the same body, what else it may not take from its worker: the
    worker's SIGTERM and SIGINT handlers (put back if the body changed them),
    its process (a body that forked: the child ends when the body is over,
    before it touches the database or the broker), and, past the limit, the
    watchdog's backstop (Watchdog)."""

    # fmt: off
    __slots__ = ("alias", "db", "due", "expired", "interrupted", "main", "pid", "record", "seconds", "started", "stop",
                 "term")
    # fmt: on

    def __init__(self, seconds: float, alias: str = DEFAULT_DB_ALIAS, record=None) -> None:
        self.seconds = seconds
        self.alias = alias
        self.record = record  # what the watchdog's last words name
        self.expired = self.interrupted = self.main = False

    def __enter__(self):
        global _armed
        self.pid = os.getpid()
        if threading.current_thread() is not threading.main_thread():
            return self
        if _handler_now(signal.SIGALRM) is not _alarm:
            signal.signal(signal.SIGALRM, _alarm)
        self.term, self.stop = _handler_now(signal.SIGTERM), _handler_now(signal.SIGINT)
        self.db = _main_connections.get(self.alias) or _main_connections.setdefault(self.alias, connections[self.alias])
        self.due, self.started = None, time.monotonic()  # (the watchdog works out when it is due: not on the hot path)
        if _watchdog.pid != self.pid:
            _watchdog.start()
        self.main, _armed = True, self
        signal.setitimer(signal.ITIMER_REAL, self.seconds, REPEAT_SECONDS)
        return self

    def __exit__(self, kind, error, traceback):
        global _armed
        if os.getpid() != self.pid:
            _end_the_fork(error)
        if self.main:
            _armed = None  # first: an alarm from now on finds nothing to stop
            signal.setitimer(signal.ITIMER_REAL, 0)
            with _disarming:
                pass  # (a watchdog acting on this body at this very moment finishes first)
            # (None: a handler not installed from Python, which cannot be put back from here)
            if _handler_now(signal.SIGTERM) is not self.term and self.term is not None:
                signal.signal(signal.SIGTERM, self.term)
            if _handler_now(signal.SIGINT) is not self.stop and self.stop is not None:
                signal.signal(signal.SIGINT, self.stop)
        if self.interrupted and not isinstance(error, TimeLimitExceeded):
            # Whatever the interrupted statement raised (or the body made of it): the limit's doing.
            raise TimeLimitExceeded(
                f"timed out after {self.seconds:g} s; its database statement was interrupted"
            ) from error
        if error is None and self.expired:
            # The body swallowed every alarm and returned: it still ran too long.
            raise TimeLimitExceeded(f"timed out after {self.seconds:g} s")
        return False


def _end_the_fork(error) -> None:
    """In a process the body forked, the body is over: that process ends now,
    whatever the body returned or raised (its SystemExit's status), before
    the worker's code would record, ack or consume through the parent's
    database connection and broker channel."""
    status = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else int(error is not None)
    os.write(2, f"A task's body forked: its child {os.getpid()} ends here (status {status}).\n".encode())
    os._exit(status)


def grace(db) -> float:
    """How long past its limit a body gets before the watchdog interrupts its
    statement, and again before it ends the process: GRACE, or on SQLite an
    eighth of the busy timeout when that is less, so that the limit (at most
    half of it) and both graces end before a guest's write gives up waiting."""
    if db.vendor != "sqlite":
        return GRACE
    return min(GRACE, float(db.settings_dict.get("OPTIONS", {}).get("timeout", SQLITE_DEFAULT_TIMEOUT)) / 8)


class Watchdog:
    """The backstop that asks nothing of the body (issue 51): a body can
    remove the alarm (`signal.alarm(0)`, a timeout recipe of its own, SIG_IGN),
    swallow every TimeLimitExceeded, or sit in one database statement the
    alarm cannot interrupt. One thread per worker process looks at the body
    armed now: past its limit and a grace, it interrupts the body's database
    statement (SQLite's interrupt(), PostgreSQL's cancel: the statement
    raises, the alarm's handler runs); if the body still has not returned
    after a second grace, it ends the process. The process's end releases
    what the body held (SQLite's write lock, PostgreSQL's transaction, the
    delivery: the broker redelivers), and the death is charged to that task
    as any death is (nightjar_delivery's watch_for_death)."""

    def __init__(self) -> None:
        self.pid: int | None = None

    def start(self) -> None:
        self.pid = os.getpid()  # (a forked worker starts its own: threads do not survive a fork)
        threading.Thread(target=self.watch, name="nightjar-tasks-watchdog", daemon=True).start()

    def watch(self) -> None:
        while True:
            limit = _armed
            if limit is None:
                left = WATCH_EVERY
            else:
                if limit.due is None:
                    limit.due = limit.started + limit.seconds + grace(limit.db)
                left = min(WATCH_EVERY, limit.due - time.monotonic())
            if left > 0:
                time.sleep(left)
                continue
            assert limit is not None  # (nothing armed: it slept above)
            with _disarming:
                if _armed is not limit:
                    continue  # it returned meanwhile
                if not limit.interrupted:
                    limit.interrupted = True
                    limit.due = time.monotonic() + grace(limit.db)
                    interrupt(limit.db)
                    continue
                _end_the_worker(limit)


def interrupt(db) -> None:
    """Stop the statement the body's connection runs now, from another thread."""
    raw = db.connection
    if raw is None:
        return
    try:
        if db.vendor == "sqlite":
            raw.interrupt()
        elif db.vendor == "postgresql":
            getattr(raw, "cancel_safe", raw.cancel)()
    except Exception:
        logger.warning("Could not interrupt the statement of a task past its time limit", exc_info=True)


def _end_the_worker(limit: Limit) -> None:
    record = limit.record
    what = f"task {record.pk} ({record.task_path})" if record is not None else "a task"
    logger.critical(
        "%s ran past its time limit of %g s and did not stop when stopped and interrupted: ending the worker "
        "(pid %d, status %d). Its transaction dies with it; the broker redelivers it, and the death is charged to it.",
        what,
        limit.seconds,
        limit.pid,
        STUCK_STATUS,
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(STUCK_STATUS)


_watchdog = Watchdog()


class LockShare:
    """On SQLite, guests' writes win against a worker that holds the write
    lock back to back (issue 51). SQLite's busy handler does not queue: a
    waiting write sleeps (1, 2, 5, ... then 100 ms at a time) and tries
    again, so a worker that takes the lock back a few ms after each commit
    can keep it from a guest until the guest's busy timeout, one task after
    another. So after holding it for SHARE_BUDGET seconds, most of the time
    (SHARE_DUTY) and never free for SHARE_PAUSE at a stretch, the worker
    leaves it free for SHARE_PAUSE, longer than the handler's longest
    sleep: every write waiting meanwhile tries again inside that pause. A
    queue of short tasks, with the lock free between them a good part of the
    time, pays nothing. With one worker a guest's write then waits at most
    about SHARE_BUDGET plus one task's hold (at most half the busy timeout)."""

    def __init__(self) -> None:
        self.held = 0.0  # seconds held since `since` with no SHARE_PAUSE between
        self.since = self.last = 0.0

    def held_from(self, began: float) -> None:
        """After the worker's transaction (or a batch's) that began at
        `began` (time.monotonic()) ended, and its delivery was acked."""
        ended = time.monotonic()
        if began - self.last >= SHARE_PAUSE:
            self.held, self.since = 0.0, began  # free long enough since the last: a new stretch
        self.held += ended - began
        self.last = ended
        if self.held < SHARE_BUDGET:
            return
        if self.held >= SHARE_DUTY * (ended - self.since):
            time.sleep(SHARE_PAUSE)
            self.last = time.monotonic()
        self.held, self.since = 0.0, self.last


lock_share = LockShare()
