"""The Worker: the parts it is made of (see __init__.py), the way a delivery
travels through them (take_one, try_process, process: receive -> screen ->
handle -> settle -> report, top to bottom), and its runs: one delivery (one
batch) at a time (`once`), until empty (`drain`), or as a service until
SIGTERM (`serve`), finishing the current delivery first; reconnecting with
backoff when the broker goes away; Ctrl+C and SIGTERM."""

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from functools import partial
from io import TextIOBase
from typing import TextIO

from django.db import router
from django.utils import timezone

from nightjar_delivery import channel, reconcile, transport
from nightjar_delivery.checkpoints import Pause
from nightjar_delivery.worker.receive import Receiver
from nightjar_delivery.worker.report import Connections, Report
from nightjar_delivery.worker.screen import Screen
from nightjar_delivery.worker.settle import Settler

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
# After a failed delivery, wait this long before handing it back, so a worker
# facing a locked or unavailable database does not spin through redeliveries.
RETRY_PAUSE = 2.0


class Worker:
    """Takes a channel's deliveries and runs its handler, never acking on an
    error. Made of parts that each own their state (a receiver, a screen, a
    settler, a report, the database connection's check); it keeps only what
    it was given and whether it is shutting down. The way of a delivery is
    take_one -> try_process -> process, in this order below."""

    def __init__(
        self,
        *,
        handler: Callable,
        pause: Pause | None = None,
        stdout: TextIO | TextIOBase | None = None,  # (TextIOBase: a command's OutputWrapper)
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
        self.pause = pause
        self.stdout = stdout or sys.stdout
        self.prefetch = prefetch
        self.reconcile_every = reconcile_every
        self.reconcile_options = reconcile_options or {}
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.shutdown = False
        # Where the handler commits (the database transport's ack joins that commit): asked once.
        self.intent_database = router.db_for_write(self.channel.intent_model)
        ch, name, say = self.channel, self.name, self.say
        self.receiver = Receiver(
            channel=ch, name=name, prefetch=prefetch, batch=batch, batch_ms=batch_ms, say=say, stopping=self.stopping
        )
        self.screen = Screen(channel=ch, name=name, receiver=self.receiver)
        self.settler = Settler(channel=ch, name=name, receiver=self.receiver, say=say)
        self.connections = Connections()
        self.report = Report(
            channel=ch,
            name=name,
            settler=self.settler,
            connections=self.connections,
            health_file=health_file,
            batch=batch,
            prefetch=prefetch,
            reconcile_every=reconcile_every,
            pause=pause,
        )

    def say(self, line: str) -> None:
        # Flushed at once: learners and tests read these lines as they happen.
        self.stdout.write(line + "\n")
        self.stdout.flush()

    def stopping(self) -> bool:
        return self.shutdown

    # -- the way of a delivery: receive -> screen -> handle -> settle -> report --

    def take_one(self) -> bool:
        """Process one ready delivery (one batch in batch mode); False when
        nothing was ready. Raises the first error, after the rest of a batch
        was handled one by one (the failed deliveries stay unacked)."""
        work = self.receiver.take()  # receive
        self.receiver.record_lost()
        if not work:
            return False
        failed = self.try_process(work)  # screen, handle, settle, report
        self.settler.hand_back(failed, counted=False)  # a failure: counted by the broker, whatever its version
        if failed:
            raise failed[0][1]
        return True

    def try_process(
        self, work: list[transport.Delivery], *, one_by_one: bool = False
    ) -> list[tuple[transport.Delivery, Exception]]:
        """Process a batch (one delivery outside batch mode, and when a failed
        batch is retried one delivery at a time, so one bad delivery never
        takes its neighbours down with it); return what failed, with its
        error, for the caller to hand back. Broker errors propagate."""
        batch = self.batch and not one_by_one
        if batch and len(work) > 1 and any(delivery.redelivered for delivery in work):
            return self.each_alone(work)  # a worker may have died on one of them: see Settler.watch_for_death
        started = self.settler.watch_for_death(work[0]) if len(work) == 1 and work[0].redelivered else None
        if started is False:
            return []  # parked: its deaths (or failures) reached the limit
        try:
            self.process(work, batch=bool(batch))  # outside batch mode (or one by one), a batch of one
            return []
        except (transport.BrokerError, BrokenPipeError):
            raise  # the broker, or the reader of our output (`worker | head`): not this delivery's failure
        except Exception as error:
            if batch and len(work) > 1:
                logger.exception("A batch of %d deliveries failed; handling them one by one", len(work))
                return self.each_alone(work)
            self.settler.forget_started(started)  # a failure, not a death
            started = None  # (nothing left for the finally to forget)
            self.connections.suspect()
            return self.settler.fail(work[0], error)  # recorded; parked at the limit, else to hand back
        finally:
            self.settler.forget_started(started)  # still alive (done, failed, interrupted): nothing to charge

    def process(self, deliveries: list[transport.Delivery], *, batch: bool = False) -> None:
        """Screen the deliveries, hand what passed to the handler, settle each
        with the broker, report: one transaction and one ack for them all in
        batch mode (the channel's handle_batch), else the per-delivery handler
        for the one delivery (it acks after its own commit). Raises on a
        database error, leaving what was not acked unacked."""
        self.connections.check()
        started = time.perf_counter()
        accepted, rejections, stored = self.screen.check(deliveries, batch=batch)
        # The database transport: the ack joins the handler's commit (transport.ack_within).
        with self.receiver.ack_within(deliveries, using=self.intent_database):
            channel = self.channel
            if batch:
                messages = [message for _, message, _ in accepted]
                if accepted:
                    self.say(
                        "\n".join(
                            f"Received {channel.label(key)} redelivered={d.redelivered}" for d, _, key in accepted
                        )
                    )
                    keys = [key for _, _, key in accepted]
                    self.settler.begin_batch(
                        f"batch of {len(deliveries)}, {channel.label(min(keys))}–{channel.label(max(keys))}"
                    )
                # Handled, its rejections recorded, in one transaction; then one ack for the batch.
                new = channel.handle_batch(messages, rejections, self.settler.ack_batch(deliveries), self.pause, stored)
                for delivery, reason in rejections:
                    self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}")
                made = [stored[pk][1] for pk in new or ()]
                self.report.measure(
                    started, handled=len(messages), rejected=len(rejections), made=made, batch_size=len(deliveries)
                )
                self.say("Handler returned.")
                return
            for delivery, reason in rejections:
                self.settler.reject(delivery, reason)  # recorded, then acked
                self.report.rejected_one()
            for delivery, message, key in accepted:
                code = channel.label(key)
                self.say(f"Received {code} redelivered={delivery.redelivered}")
                self.settler.begin(delivery, code)
                since = timezone.now() if delivery.redelivered else None
                self.handler(message, partial(self.settler.ack_current, delivery), self.pause)  # acks after its commit
                # The handler does not say whether it made the outcome. A first delivery almost always
                # does; a redelivery (after a crash: the slow cases the latency metric is for) may or
                # may not, so for those the channel says (made_since: one query, for redeliveries only).
                made_now = not delivery.redelivered or self.report.made_since(key, since)
                self.report.measure(started, handled=1, made=[stored[key][1]] if made_now else [])
                self.say("Handler returned.")

    def each_alone(self, work: list[transport.Delivery]) -> list[tuple[transport.Delivery, Exception]]:
        """A batch's deliveries one at a time, each in a transaction of its own,
        each ack sent at once (Settler.acks_at_once)."""
        with self.settler.acks_at_once():
            return [failure for delivery in work for failure in self.try_process([delivery], one_by_one=True)]

    def process_or_hand_back(self, work: list[transport.Delivery]) -> None:
        """Service mode: what failed is handed back unacked after a pause, so
        a worker facing a locked database does not spin through redeliveries."""
        failed = self.try_process(work)
        if failed:
            self.sleep(RETRY_PAUSE, keepalive=True)
            self.settler.hand_back(failed)

    # -- runs: one delivery, a drain, a service --

    def connect(self) -> None:
        self.receiver.connect()
        if self.pause is not None:

            def keepalive(seconds: float) -> None:  # paused at a checkpoint: still reported, still connected
                self.report.beat()
                self.receiver.keepalive(seconds)

            self.pause.keepalive = keepalive

    def close(self) -> None:
        self.receiver.close()

    def once(self) -> bool:
        """The plain `worker`: one delivery. A run that reported while it was
        paused says it stopped, or the desk would list it running."""
        try:
            return self.take_one()
        finally:
            if self.report.has_saved():
                self.report.save(stopped=True)

    def drain(self) -> int:
        """Take deliveries until none is ready; returns how many."""
        self.report.runs_as("drain")
        self.report.save()
        try:
            while not self.shutdown and self.take_one():
                self.report.beat()
        finally:
            self.report.save(stopped=True)
        return sum(self.report.totals())

    def serve(self) -> None:
        """Consume until SIGTERM/SIGINT, reconnecting with backoff when
        RabbitMQ goes away. A failed delivery is logged and handed back."""
        self.install_signal_handlers()
        self.report.runs_as("serve", service=True)
        self.settler.defer_acks(self.pause is None)
        self.report.save()
        backoff = 1.0
        last_reconcile = time.monotonic()
        try:
            while not self.shutdown:
                try:
                    self.connect()
                    self.say(
                        f"Serving {self.channel.queue} from {self.receiver.node()} (prefetch {self.prefetch});"
                        " stop with Ctrl+C or SIGTERM."
                    )
                    backoff = 1.0
                    for delivery in self.receiver.deliveries():
                        self.report.beat()
                        self.receiver.record_lost()
                        if delivery:  # a list: one delivery, or a batch
                            self.process_or_hand_back(delivery)
                        if self.reconcile_every and time.monotonic() - last_reconcile >= self.reconcile_every:
                            last_reconcile = time.monotonic()
                            self.reconcile()
                        if self.shutdown:
                            self.receiver.stop()
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
            self.report.save(stopped=True)
        self.say(f"Stopped after {self.report.totals()[0]} deliveries.")

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
            self.report.beat()
            if keepalive and self.receiver.can_keep_alive():
                self.receiver.keepalive(0.2)
            else:
                time.sleep(0.2)

    def interrupted(self) -> str:
        """What a Ctrl+C at a checkpoint did to the delivery under way (the settler knows)."""
        return self.settler.interrupted()

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
