"""SQLite's WAL checkpoints, off the guests' requests.

By default SQLite checkpoints on commit: the connection whose commit takes
the write-ahead log past 1,000 pages copies it into the database and fsyncs
both files before its request can answer. A registration writes about five
pages, so one POST in a couple of hundred (several in a row while readers
keep the log from restarting) waited on two fdatasync calls, 1 to 110 ms on
a busy disk: the web path's periodic p99 stall (issue 43).

A site process (nightjar/wsgi.py) therefore checkpoints from a thread of its
own, every second, and never waits there on a reader or a writer (PASSIVE).
Its request connections checkpoint only past FALLBACK_PAGES, ten times
SQLite's default: the bound on the log should that thread fall behind or
die. Under steady writes the log may reach it even so (the next writer
starts the log over only if no commit landed during the checkpoint's fsyncs:
41 MB after 20 s at 200 POSTs/s); the requests' checkpoints there find the
thread's work done and cost a few small fsyncs (15 in 4,000 POSTs, 7 ms in
all). Workers and commands keep SQLite's default (their commits are
nobody's request), so they checkpoint too while the site is down.
"""

import logging
import threading

from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

FALLBACK_PAGES = 10_000
INTERVAL = 1.0


def request_connections_leave_checkpoints(sender, connection, **kwargs) -> None:
    """A new SQLite connection of the site checkpoints on commit only past FALLBACK_PAGES."""
    if connection.vendor == "sqlite":
        connection.connection.execute(f"PRAGMA wal_autocheckpoint={FALLBACK_PAGES}")


class Checkpointer(threading.Thread):
    """Checkpoints one SQLite database every `interval` seconds on a
    connection of its own; `passes` counts its passes and `last` keeps the
    last one's answer (tests wait on them)."""

    def __init__(self, alias: str, interval: float = INTERVAL) -> None:
        super().__init__(name=f"nightjar-wal-checkpoint-{alias}", daemon=True)
        self.alias = alias
        self.interval = interval
        self.passes = 0
        self.last: tuple[int, int, int] | None = None
        self.passed = threading.Condition()
        self.stopping = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self.stopping.wait(self.interval):
            try:
                last = self.checkpoint()
            except Exception:
                # A locked or missing file now is no reason to stop for good; the next second
                # tries again. Said once, with its traceback, and again when it works: a web
                # process tries every second for as long as the site runs.
                if not failures:
                    logger.exception(
                        "The WAL checkpoint of database %r failed; retrying every %g s", self.alias, self.interval
                    )
                failures += 1
                connections[self.alias].close()
                last = None
            else:
                if failures:
                    logger.info(
                        "The WAL checkpoint of database %r works again after %d failed tries", self.alias, failures
                    )
                failures = 0
            with self.passed:
                self.last = last
                self.passes += 1
                self.passed.notify_all()
        connections[self.alias].close()

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: copies what no reader still needs, waits
        for nobody. Returns SQLite's (busy, frames in the log, frames copied)."""
        with connections[self.alias].cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            return tuple(cursor.fetchone())

    def stop(self) -> None:
        self.stopping.set()
        self.join()


def checkpoint_in_background() -> list[Checkpointer]:
    """In a site process: request connections leave checkpoints to one
    thread per SQLite database, started here."""
    aliases = [alias for alias in connections if connections[alias].vendor == "sqlite"]
    if not aliases:
        return []
    connection_created.connect(request_connections_leave_checkpoints, dispatch_uid="nightjar-wal-checkpoint")
    for alias in aliases:  # one opened while the site loaded
        if connections[alias].connection is not None:
            request_connections_leave_checkpoints(None, connections[alias])
    threads = [Checkpointer(alias) for alias in aliases]
    for thread in threads:
        thread.start()
    return threads
