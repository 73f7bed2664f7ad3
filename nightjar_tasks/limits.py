"""What a task's body may do to its worker: nothing beyond its own failure.

- Whatever the body raises, BaseException included (SystemExit, exit(),
  KeyboardInterrupt), is the task's failure (own_failure), except a
  KeyboardInterrupt the worker's own signal handler raised (a real Ctrl+C).
- A body past its time limit is stopped (time_limit): SIGALRM in the
  worker's main thread raises TimeLimitExceeded in the body, wherever it is.

Why an alarm, and not a thread or a child process per task: a thread cannot
be stopped, and its body would run on another database connection, outside
the transaction that marks the task done; a child process per task costs a
fork (and a database connection) per task and cannot share the worker's
transaction either. A signal interrupts a sleep, a busy loop, and a blocking
socket read (PEP 475 retries an interrupted system call only when the
handler returns; ours raises), in the thread that holds the transaction, so
the rollback is the ordinary one. It costs about 3 µs per task (two
setitimer calls and a look at the handler; bin/bench/tasks.py measures it). What it cannot interrupt: a single C call
that never returns to Python (a statement the database itself runs: use the
database's statement timeout), and a body that runs in a thread of its own.
"""

import signal
import threading
from typing import TYPE_CHECKING

# signal.getsignal() without its wrapper, which tries to make an enum of the
# handler (~2 µs per call, most of a task's alarm): the handler as it is.
if TYPE_CHECKING:  # typeshed describes no _signal: the wrapper's signature is the same
    from signal import getsignal as _handler_now
else:
    from _signal import getsignal as _handler_now

from django.db import connections

from nightjar_delivery import interrupted_by_signal

# When a task says nothing and its backend's OPTIONS say nothing.
DEFAULT_TIME_LIMIT = 300.0
# After the first alarm, again this often: a body that swallows the first
# (`except BaseException: pass`) is stopped at the next.
REPEAT_SECONDS = 0.5
# SQLite's busy timeout when the DATABASES entry gives none (Python's sqlite3).
SQLITE_DEFAULT_TIMEOUT = 5.0


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


_armed = None  # the Limit of the body running now, if any


def _alarm(signum, frame):
    limit = _armed
    if limit is None:
        return  # an alarm left over from a body that ended: nothing to stop
    limit.expired = True
    raise TimeLimitExceeded(f"timed out after {limit.seconds:g} s")


class Limit:
    """Arm with `with Limit(seconds):` around a body. The handler is
    installed once per process (signal.signal costs ~5 µs, a task's whole
    alarm ~3 µs), again only if a body replaced it. Outside the main thread
    (a worker run in a thread of its own), no signal can reach the body:
    then nothing is armed."""

    __slots__ = ("expired", "main", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self.main = False

    def __enter__(self):
        global _armed
        if threading.current_thread() is not threading.main_thread():
            return self
        if _handler_now(signal.SIGALRM) is not _alarm:
            signal.signal(signal.SIGALRM, _alarm)
        self.main, _armed = True, self
        signal.setitimer(signal.ITIMER_REAL, self.seconds, REPEAT_SECONDS)
        return self

    def __exit__(self, kind, error, traceback):
        global _armed
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _armed = None
        if error is None and self.expired:
            # The body swallowed every alarm and returned: it still ran too long.
            raise TimeLimitExceeded(f"timed out after {self.seconds:g} s")
        return False
