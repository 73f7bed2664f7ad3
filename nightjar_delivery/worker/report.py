"""What a worker tells others: its metrics per delivery or batch (latency for
what it made), its health file, and its row in the workers table."""

import logging
import time

from django.db import DatabaseError, connection

from nightjar_delivery import conf, metrics, recording, sql, transport

logger = logging.getLogger("nightjar_delivery.worker")  # the name its log lines always carried


class Reporting:
    """A Worker's reports. Keeps last_beat, health_failures and last_report;
    reports what the loop set (started, runs, reports_as_service,
    health_file) and the counts the other parts keep."""

    def made_since(self, key: int, since) -> bool:
        """Whether this intent's outcome was written since then, for the
        latency metric. Asked after the commit: a database error here costs the
        observation, never the delivery (already committed, its ack maybe sent)."""
        try:
            return self.channel.made_since(key, since)
        except DatabaseError:
            logger.warning("Could not tell whether %s got its %s now", self.channel.label(key), self.channel.outcome)
            self.connections_suspect = True
            return False

    def measure(self, started: float, *, handled: int, rejected: int = 0, made: list) -> None:
        """Metrics for a delivery or batch that was committed and acked."""
        metrics.HANDLER_SECONDS.observe(time.perf_counter() - started)
        metrics.HANDLED.inc(handled)
        if rejected:
            metrics.REJECTED.inc(rejected)
        if made and self.channel.latency is not None:
            now = time.time()
            for created in made:  # seconds since the epoch (Channel.stored)
                self.channel.latency.observe(max(0.0, now - created))

    def beat(self) -> None:
        """The loop is running: touch the health file (at most once a second)
        and rewrite this worker's report (every NIGHTJAR_WORKER_REPORT_SECONDS)."""
        now = time.monotonic()
        every = conf.NIGHTJAR_WORKER_REPORT_SECONDS
        # Never inside the handler's transaction (a learner paused there): the row would wait for its commit;
        # nor while an ack waits to join the handler's commit (the database transport): it would join this one.
        if every and now - self.last_report >= every and not connection.in_atomic_block and not sql.awaiting_commit():
            self.report()
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
        words = ["serve" if self.reports_as_service else self.runs]
        words.append(f"batch {self.batch}" if self.batch else "per delivery")
        words.append(f"prefetch {self.prefetch}")
        if self.reconcile_every:
            words.append(f"reconcile every {self.reconcile_every:g} s")
        if self.pause is not None and self.pause.at:
            words.append(f"pauses {self.pause.at}")
        return ", ".join(words)

    def report(self, *, stopped: bool = False) -> None:
        """What staff see in the workers table (never once per delivery)."""
        if not conf.NIGHTJAR_WORKER_REPORT_SECONDS:
            return
        starting, self.last_report = not self.last_report, time.monotonic()
        host, _, pid = self.name.rpartition(":")
        fields = {
            "host": host,
            "pid": int(pid),
            "transport": transport.name(),
            "mode": self.mode()[:100],
            "started": self.started,
            "handled": self.handled,
            "rejected": self.rejected,
            "failed": self.failed,
            "handed_back": self.handed_back,
            "current": self.on[:100],
        }
        recording.report_worker(name=self.name, fields=fields, stopped=stopped, starting=starting, channel=self.channel)
