"""Report, what a worker tells others: its metrics per delivery or batch
(latency for what it made) and its counts of what it handled and rejected,
its health file, and its row in the workers table; and the database
connection's check (Connections), which the way of a delivery asks for first
and any part may mark suspect."""

import datetime
import logging
import time
from pathlib import Path

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from nightjar_delivery import conf, metrics, recording, sql, transport
from nightjar_delivery.channel import Channel
from nightjar_delivery.checkpoints import Pause
from nightjar_delivery.worker.settle import Settler

logger = logging.getLogger("nightjar_delivery.worker")  # the name its log lines always carried


class Connections:
    """Owns whether the database connection is suspect and when it was last
    checked: a failure anywhere marks it (suspect()), the next delivery's
    check (check()) replaces it."""

    def __init__(self) -> None:
        self.suspected = False
        self.last_check = 0.0

    def suspect(self) -> None:
        self.suspected = True

    def check(self) -> None:
        """Drop a database connection that broke or outlived CONN_MAX_AGE, as
        Django does around a request: after a failure, else once a second
        (on PostgreSQL each check costs a round trip, too much per delivery)."""
        if self.suspected and not connection.in_atomic_block:
            # After a failure, a new connection: one that still answers SELECT 1
            # may keep a state that fails every write (a session opened while the
            # database was read-only stays read-only until CONN_MAX_AGE).
            connection.close()
        if self.suspected or time.monotonic() - self.last_check >= 1.0:
            close_old_connections()
            self.suspected = False
            self.last_check = time.monotonic()


class Report:
    """Owns the counts handled and rejected, the health beat (health_file,
    last_beat, health_failures) and the report row (started, last_report,
    how the worker runs: runs, as_service). Asks the settler for its counts
    and what the worker is on."""

    def __init__(
        self,
        *,
        channel: Channel,
        name: str,
        settler: Settler,
        connections: Connections,
        health_file: str | None,
        batch: int | None,
        prefetch: int,
        reconcile_every: float | None,
        pause: Pause | None,
    ) -> None:
        self.channel = channel
        self.name = name
        self.settler = settler
        self.connections = connections
        self.batch = batch
        self.prefetch = prefetch
        self.reconcile_every = reconcile_every
        self.pause = pause
        self.handled = 0
        self.rejected = 0
        self.started = timezone.now()
        self.health_file = Path(health_file) if health_file else None
        self.last_beat = 0.0
        self.health_failures = 0  # touches failed in a row (said once)
        self.last_report = 0.0
        self.as_service = False
        self.runs = "one delivery"  # what the report calls a run that is not a service: drain() says "drain"

    # -- per delivery or batch --

    def made_since(self, key: int, since: datetime.datetime | None) -> bool:
        """Whether this intent's outcome was written since then, for the
        latency metric. Asked after the commit: a database error here costs the
        observation, never the delivery (already committed, its ack maybe sent)."""
        try:
            return self.channel.made_since(key, since)
        except DatabaseError:
            logger.warning("Could not tell whether %s got its %s now", self.channel.label(key), self.channel.outcome)
            self.connections.suspect()
            return False

    def measure(self, started: float, *, handled: int, rejected: int = 0, made: list, batch_size: int = 0) -> None:
        """Counts and metrics for a delivery or batch that was committed and acked."""
        self.handled += handled
        self.rejected += rejected
        metrics.HANDLER_SECONDS.observe(time.perf_counter() - started)
        metrics.HANDLED.inc(handled)
        if rejected:
            metrics.REJECTED.inc(rejected)
        if made and self.channel.latency is not None:
            now = time.time()
            for created in made:  # seconds since the epoch (Channel.stored)
                self.channel.latency.observe(max(0.0, now - created))
        if batch_size:
            metrics.BATCH_SIZE.observe(batch_size)

    def rejected_one(self) -> None:
        """A rejection settled outside batch mode (recorded, then acked)."""
        self.rejected += 1
        metrics.REJECTED.inc()

    def totals(self) -> tuple[int, int]:
        """(handled, rejected) so far."""
        return self.handled, self.rejected

    # -- the health beat and the report row --

    def runs_as(self, runs: str, *, service: bool = False) -> None:
        self.runs, self.as_service = runs, service

    def beat(self) -> None:
        """The loop is running: touch the health file (at most once a second)
        and rewrite this worker's report (every NIGHTJAR_WORKER_REPORT_SECONDS)."""
        now = time.monotonic()
        every = conf.NIGHTJAR_WORKER_REPORT_SECONDS
        # Never inside the handler's transaction (a learner paused there): the row would wait for its commit.
        if every and now - self.last_report >= every and not connection.in_atomic_block:
            self.save()
        if self.health_file is None or now - self.last_beat < 1.0:
            return
        self.last_beat = now
        try:
            self.health_file.touch()
        except OSError as error:
            # Said once, and again when it works: the loop tries every second.
            if not self.health_failures:
                logger.warning("Could not touch the health file %s: %s; trying every second", self.health_file, error)
            self.health_failures += 1
            return
        if self.health_failures:
            logger.info("The health file %s works again after %d failed tries", self.health_file, self.health_failures)
            self.health_failures = 0

    def mode(self) -> str:
        words = ["serve" if self.as_service else self.runs]
        words.append(f"batch {self.batch}" if self.batch else "per delivery")
        words.append(f"prefetch {self.prefetch}")
        if self.reconcile_every:
            words.append(f"reconcile every {self.reconcile_every:g} s")
        if self.pause is not None and self.pause.at:
            words.append(f"pauses {self.pause.at}")
        return ", ".join(words)

    def has_saved(self) -> bool:
        return bool(self.last_report)

    def save(self, *, stopped: bool = False) -> None:
        """What staff see in the workers table (never once per delivery)."""
        if not conf.NIGHTJAR_WORKER_REPORT_SECONDS:
            return
        starting, self.last_report = not self.last_report, time.monotonic()
        host, _, pid = self.name.rpartition(":")
        settled = self.settler.counts()
        fields = {
            "host": host,
            "pid": int(pid),
            "transport": transport.name(),
            "mode": self.mode()[:100],
            "started": self.started,
            "handled": self.handled,
            "rejected": self.rejected,
            "failed": settled["failed"],
            "handed_back": settled["handed_back"],
            "current": settled["current"],
        }
        # Its commit never carries an ack that waits for the handler's (the database transport's ack_within).
        with sql.commits_of_their_own():
            recording.report_worker(
                name=self.name, fields=fields, stopped=stopped, starting=starting, channel=self.channel
            )
