"""The Worker and its loop: one delivery (one batch) at a time (`take_one`),
until empty (`drain`), or as a service until SIGTERM (`serve`), finishing the
current delivery first; reconnecting with backoff when the broker goes away;
Ctrl+C and SIGTERM. Its other jobs are the parts it is made of (see
__init__.py)."""

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from django.utils import timezone

from nightjar_delivery import channel, reconcile, transport
from nightjar_delivery.checkpoints import Pause
from nightjar_delivery.worker.failures import Failures
from nightjar_delivery.worker.handle import Handling
from nightjar_delivery.worker.report import Reporting
from nightjar_delivery.worker.screen import Screening

logger = logging.getLogger("nightjar_delivery.worker")  # the name its log lines always carried

# Set when the worker's own SIGINT/SIGTERM handler raised KeyboardInterrupt:
# a handler tells a real Ctrl+C from a body that raised KeyboardInterrupt
# itself (interrupted_by_signal), which is only that body's failure.
_signalled = False


def interrupted_by_signal() -> bool:
    """Whether the KeyboardInterrupt under way came from a signal the worker was sent."""
    return _signalled


def _interrupted() -> None:
    global _signalled
    _signalled = True
    raise KeyboardInterrupt


RECONNECT_BACKOFF_MAX = 30.0  # seconds: the reconnect backoff doubles up to this


class Worker(Screening, Handling, Failures, Reporting):
    """Takes a channel's deliveries and runs its handler, never acking on an
    error. Its state is set here; each part says which of it is its own."""

    def __init__(
        self,
        *,
        handler: Callable,
        pause: Pause | None = None,
        stdout: TextIO | None = None,
        prefetch: int = 1,
        reconcile_every: float | None = None,
        reconcile_options: dict | None = None,
        batch: int | None = None,
        batch_ms: float = 50,
        health_file: str | None = None,
    ) -> None:
        self.handler = handler
        self.channel = channel.current()  # what the bodies mean, where records go
        self.batch = batch
        self.batch_seconds = batch_ms / 1000
        self.pause = pause
        self.stdout = stdout or sys.stdout
        self.prefetch = prefetch
        self.reconcile_every = reconcile_every
        self.reconcile_options = reconcile_options or {}
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.consumer: transport.Consumer | None = None
        # Queued acks only in service mode without checkpoints: a learner who
        # pauses or kills the worker must find every ack already sent.
        self.flush_acks = True
        self.shutdown = False
        self.handled = 0
        self.rejected = 0
        self.failed = 0
        self.current: transport.Delivery | None = None  # the delivery the handler is on
        self.current_acked = False
        self.handed_back = 0
        self.on = ""  # what the report says the worker is on (or was on last)
        self.started = timezone.now()
        self.health_file = Path(health_file) if health_file else None
        self.last_beat = 0.0
        self.health_failures = 0  # touches failed in a row (said once)
        self.last_report = 0.0
        self.reports_as_service = False
        self.runs = "one delivery"  # what the report calls a run that is not a service: drain() says "drain"
        self.connections_suspect = False
        self.last_connection_check = 0.0
        # Rows read ahead for deliveries already received (see stored).
        self.ahead: dict[int, tuple[str, float]] = {}
        self.ahead_read = 0.0

    def say(self, line: str) -> None:
        # Flushed at once: learners and tests read these lines as they happen.
        self.stdout.write(line + "\n")
        self.stdout.flush()

    def connect(self) -> None:
        self.consumer = transport.Consumer(prefetch=self.prefetch, queue=self.channel.queue)
        if self.pause is not None:
            keepalive = self.consumer.keepalive
            self.pause.keepalive = lambda seconds: (self.beat(), keepalive(seconds))

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def take_one(self) -> bool:
        """Process one ready delivery (one batch in batch mode); False when
        nothing was ready. Raises the first error, after the rest of a batch
        was handled one by one (the failed deliveries stay unacked)."""
        work = self.collect_batch() if self.batch else self.one(self.consumer.get())
        self.record_lost()
        if not work:
            return False
        failed = self.try_process(work)
        for delivery, _ in failed:
            self.consumer.requeue(delivery.tag)  # a failure: counted by the broker, whatever its version
        if failed:
            raise failed[0][1]
        return True

    def once(self) -> bool:
        """The plain `worker`: one delivery. A run that reported while it was
        paused says it stopped, or the desk would list it running."""
        try:
            return self.take_one()
        finally:
            if self.last_report:
                self.report(stopped=True)

    def collect_batch(self, *, first_wait: float = 1.0) -> list[transport.Delivery]:
        """Up to `batch` deliveries, or fewer when batch_ms pass without one.
        The first one may take up to first_wait (the consumer is just starting)."""
        deliveries: list[transport.Delivery] = []
        idle = 0.0
        for delivery in self.consumer.consume(idle_seconds=self.batch_seconds):
            if delivery is None:
                idle += self.batch_seconds
                if deliveries or idle >= first_wait or self.shutdown:
                    break
                continue
            deliveries.append(delivery)
            if len(deliveries) >= self.batch:
                break
        return deliveries

    def drain(self) -> int:
        """Take deliveries until none is ready; returns how many."""
        self.runs = "drain"
        self.report()
        try:
            while not self.shutdown and self.take_one():
                self.beat()
        finally:
            self.report(stopped=True)
        return self.handled + self.rejected

    def serve(self) -> None:
        """Consume until SIGTERM/SIGINT, reconnecting with backoff when
        RabbitMQ goes away. A failed delivery is logged and handed back."""
        self.install_signal_handlers()
        self.reports_as_service = True
        self.flush_acks = self.pause is not None
        self.report()
        backoff = 1.0
        last_reconcile = time.monotonic()
        try:
            while not self.shutdown:
                try:
                    self.connect()
                    self.say(
                        f"Serving {self.channel.queue} from {self.consumer.node} (prefetch {self.prefetch});"
                        " stop with Ctrl+C or SIGTERM."
                    )
                    backoff = 1.0
                    for delivery in self.deliveries():
                        self.beat()
                        self.record_lost()
                        if delivery:  # a list: one delivery, or a batch
                            self.process_or_hand_back(delivery)
                        if self.reconcile_every and time.monotonic() - last_reconcile >= self.reconcile_every:
                            last_reconcile = time.monotonic()
                            self.reconcile()
                        if self.shutdown:
                            self.consumer.stop_consuming()
                            break
                except transport.BrokerError as error:
                    if self.shutdown:
                        break
                    logger.warning("%s; reconnecting in %.0f s", error, backoff)
                    self.say(f"{transport.name()} is unavailable; reconnecting in {backoff:.0f} s.")
                    self.close()
                    self.sleep(backoff)
                    backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX)
                finally:
                    self.close()
        finally:
            # Also after Ctrl+C at a pause: the desk must not list it running.
            self.report(stopped=True)
        self.say(f"Stopped after {self.handled} deliveries.")

    @staticmethod
    def one(delivery: transport.Delivery | None) -> list[transport.Delivery]:
        """A delivery as a batch of one (nothing as an empty one)."""
        return [delivery] if delivery is not None else []

    def deliveries(self):
        """Yield lists: of one delivery, or a batch in batch mode; an empty
        one now and then when idle, so the loop can look at its flags."""
        if not self.batch:
            for delivery in self.consumer.consume(idle_seconds=0.5):
                yield self.one(delivery)
            return
        while True:
            yield self.collect_batch(first_wait=0.5)

    def reconcile(self) -> None:
        try:
            report = reconcile.reconcile(
                self.channel, **self.reconcile_options, actor=f"worker {self.name} (--reconcile-every)"
            )
        except Exception:
            logger.exception("Reconcile failed; trying again at the next interval")
            return
        for code in report.collected.parked:
            self.say(f"Parked {code}: its delivery failed until the delivery limit.")
        if report.published:
            self.say(f"Reconcile republished {len(report.published)}; {report.remaining} remain.")

    def sleep(self, seconds: float, *, keepalive: bool = False) -> None:
        """Sleep in short slices, waking for shutdown (and heartbeats)."""
        deadline = time.monotonic() + seconds
        while not self.shutdown and time.monotonic() < deadline:
            self.beat()
            if keepalive and self.consumer is not None:
                self.consumer.keepalive(0.2)
            else:
                time.sleep(0.2)

    def install_interrupt_handler(self) -> None:
        """Outside service mode: Ctrl+C raises KeyboardInterrupt wherever the
        worker is, as Python's own handler does, but says it was a signal."""
        signal.signal(signal.SIGINT, lambda signum, frame: _interrupted())

    def install_signal_handlers(self) -> None:
        def stop(signum, frame):
            if self.pause is not None and self.pause.waiting:
                _interrupted()  # Ctrl+C at a checkpoint: leave now, unacked.
            if not self.shutdown:
                self.say(f"{signal.Signals(signum).name} received; finishing the current delivery, then stopping.")
            self.shutdown = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
