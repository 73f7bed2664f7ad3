"""The consume loop around the handler: take deliveries, screen them against
the contract and the stored intents (one path, `screen`, for a batch of one
as for a batch), run the handler, and never ack on an error. One delivery
(one batch) at a time (`take_one`), until empty (`drain`), or as a service
until SIGTERM (`serve`), finishing the current delivery first.
"""

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from nightjar_delivery import channel, conf, metrics, reconcile, recording, transport
from nightjar_delivery.checkpoints import Pause
from nightjar_delivery.codec import ContractError

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


# After a failed delivery, wait this long before handing it back, so a worker
# facing a locked or unavailable database does not spin through redeliveries.
RETRY_PAUSE = 2.0
RECONNECT_BACKOFF_MAX = 30.0


class Worker:
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

    def screen(self, deliveries: list[transport.Delivery], *, batch: bool) -> tuple[list, list, dict]:
        """The one screening path, for a batch of one as for a batch: decode
        every body (the contract), read the stored intents in one query
        (outside batch mode with those of the deliveries already waiting: see
        read_ahead), note redeliveries, and check each message against its
        own stored intent. Returns (accepted: [(delivery, message, key)],
        rejections: [(delivery, reason)], stored: {key: (what, when stored)});
        the caller records the rejections before it acks them."""
        user = self.channel
        decoded, rejections = [], []
        for delivery in deliveries:
            try:
                message = user.decode(delivery.body)
            except ContractError as error:
                rejections.append((delivery, str(error)))
                continue
            decoded.append((delivery, message, user.intent_id(message)))
        keys = {key for _, _, key in decoded}
        stored = self.read_ahead(*keys) if len(keys) == 1 and not batch else user.stored(keys)  # {} for none
        self.note_redeliveries(deliveries, {delivery.tag: key for delivery, _, key in decoded})
        accepted = []
        for delivery, message, key in decoded:
            try:
                user.check_stored(message, stored.get(key, (None,))[0])
            except ContractError as error:
                rejections.append((delivery, str(error)))
                continue
            accepted.append((delivery, message, key))
        return accepted, rejections, stored

    def process(self, deliveries: list[transport.Delivery], *, batch: bool = False) -> None:
        """Screen the deliveries, then hand what passed to the handler: one
        transaction and one ack for them all in batch mode (handle_batch), else
        the per-delivery handler for the one delivery. Raises on a database
        error, leaving what was not acked unacked."""
        self.check_connections()
        started = time.perf_counter()
        accepted, rejections, stored = self.screen(deliveries, batch=batch)
        if batch:
            self.handle_batch(deliveries, accepted, rejections, stored, started)
            return
        for delivery, reason in rejections:
            self.reject(delivery, reason)
        for delivery, message, key in accepted:
            self.handle_one(delivery, message, key, stored[key][1], started)

    def handle_batch(self, deliveries, accepted, rejections, stored, started: float) -> None:
        """The checked messages and the rejections in one transaction (the
        channel's handle_batch), then one ack for the whole batch."""
        user = self.channel
        messages = [message for _, message, _ in accepted]
        if accepted:
            self.say("\n".join(f"Received {user.label(key)} redelivered={d.redelivered}" for d, _, key in accepted))
            keys = [key for _, _, key in accepted]
            self.on = f"batch of {len(deliveries)}, {user.label(min(keys))}–{user.label(max(keys))}"
        tags = [delivery.tag for delivery in deliveries]
        ack_all = lambda: self.consumer.ack_many(tags, flush=self.flush_acks)  # noqa: E731
        new = user.handle_batch(messages, rejections, ack_all, self.pause, stored)
        for delivery, reason in rejections:
            self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}")
        self.handled += len(messages)
        self.rejected += len(rejections)
        self.measure(started, handled=len(messages), rejected=len(rejections), made=[stored[pk][1] for pk in new or ()])
        metrics.BATCH_SIZE.observe(len(deliveries))
        self.say("Handler returned.")

    def handle_one(self, delivery: transport.Delivery, message, key: int, created: float, started: float) -> None:
        """The per-delivery handler, which acks after its own commit."""
        code = self.channel.label(key)
        self.say(f"Received {code} redelivered={delivery.redelivered}")
        self.current, self.current_acked = delivery, False
        self.on = code
        since = timezone.now() if delivery.redelivered else None
        self.handler(message, lambda: self.ack_current(delivery), self.pause)
        self.handled += 1
        # The handler does not say whether it made the ticket. A first delivery almost always
        # does; a redelivery (after a crash: the slow cases the latency metric is for) may or
        # may not, so for those the tickets table says (one query, for redeliveries only).
        made = not delivery.redelivered or self.made_since(key, since)
        self.measure(started, handled=1, made=[created] if made else [])
        self.say("Handler returned.")

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

    def check_connections(self) -> None:
        """Drop a database connection that broke or outlived CONN_MAX_AGE, as
        Django does around a request: after a failure, else once a second
        (on PostgreSQL each check costs a round trip, too much per delivery)."""
        if self.connections_suspect and not connection.in_atomic_block:
            # After a failure, a new connection: one that still answers SELECT 1
            # may keep a state that fails every write (a session opened while the
            # database was read-only stays read-only until CONN_MAX_AGE).
            connection.close()
        if self.connections_suspect or time.monotonic() - self.last_connection_check >= 1.0:
            close_old_connections()
            self.connections_suspect = False
            self.last_connection_check = time.monotonic()

    def measure(self, started: float, *, handled: int, rejected: int = 0, made: list) -> None:
        """Metrics for a delivery or batch that was committed and acked."""
        metrics.HANDLER_SECONDS.observe(time.perf_counter() - started)
        metrics.HANDLED.inc(handled)
        if rejected:
            metrics.REJECTED.inc(rejected)
        if made:
            now = time.time()
            for created in made:  # seconds since the epoch (Channel.stored)
                metrics.LATENCY.observe(max(0.0, now - created))

    def note_redeliveries(self, deliveries: list[transport.Delivery], keys: dict) -> None:
        """Staff see in an intent's history when it came again: one row per
        redelivery, one statement per batch, nothing for a first delivery.
        keys: {tag: intent key} of the deliveries that decoded."""
        again = [delivery for delivery in deliveries if delivery.redelivered]
        if again:
            pairs = [(keys.get(d.tag), d.attempts + 1) for d in again]
            recording.record_redeliveries(deliveries=pairs, worker=self.name, user=self.channel)

    def ack_current(self, delivery: transport.Delivery) -> None:
        self.consumer.ack(delivery.tag, flush=self.flush_acks)
        self.current_acked = True

    def interrupted(self) -> str:
        """What a Ctrl+C at a checkpoint did to the delivery, in one honest sentence."""
        if self.current is not None and self.current_acked:
            return f"Interrupted; the delivery was already acked, so {transport.name()} has forgotten it: nothing goes back."
        sentence = f"Interrupted; the delivery goes back to {transport.name()}."
        if self.current is None:
            return sentence
        # Parking is Nightjar's own count of failures; returns only meet the
        # broker's backstop limit, which each transport says in its own words.
        returns, limit = self.current.attempts + 1, conf.NIGHTJAR_DELIVERY_LIMIT
        return (
            f"{sentence} No failure is recorded, so it never counts towards parking ({limit} failed attempts)."
            f" It has gone back {returns} time(s); {transport.past_the_return_limit(limit)},"
            " and the next reconcile publishes it again."
        )

    def read_ahead(self, key: int) -> dict[int, tuple[object, float]]:
        """The stored intent of one delivery ({} if there is none), read in one
        query with those of the deliveries already waiting in the consumer's
        buffer, as a batch reads its own: a delivery finds its row read at
        most a second before (else read again) and each row serves one
        delivery. Saves a query per delivery — on PostgreSQL a round trip
        (bin/benchmark.py, pairs)."""
        if time.monotonic() - self.ahead_read < 1.0 and key in self.ahead:
            return {key: self.ahead.pop(key)}
        ids = {key} | self.channel.hinted_ids(self.consumer.waiting()[: self.prefetch])
        self.ahead, self.ahead_read = self.channel.stored(ids), time.monotonic()
        found = self.ahead.pop(key, None)
        return {key: found} if found is not None else {}

    def reject(self, delivery: transport.Delivery, reason: str) -> None:
        # Commit the record first; only then may RabbitMQ forget the delivery.
        with transaction.atomic():
            record = recording.record_rejection(delivery=delivery, reason=reason, user=self.channel)
        self.consumer.ack(delivery.tag)
        self.rejected += 1
        metrics.REJECTED.inc()
        already = "" if record is not None else " (already recorded)"
        self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}{already}")

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

    def process_or_hand_back(self, work: list[transport.Delivery]) -> None:
        """Service mode: what failed is handed back unacked after a pause, so
        a worker facing a locked database does not spin through redeliveries."""
        failed = self.try_process(work)
        if failed:
            self.sleep(RETRY_PAUSE, keepalive=True)
            for delivery, _ in failed:
                self.consumer.requeue(delivery.tag)
                self.handed_back += 1
                metrics.HANDED_BACK.inc()

    def try_process(
        self, work: list[transport.Delivery], *, one_by_one: bool = False
    ) -> list[tuple[transport.Delivery, Exception]]:
        """Process a batch (one delivery outside batch mode, and when a failed
        batch is retried one delivery at a time, so one bad delivery never
        takes its neighbours down with it); return what failed, with its
        error. Broker errors propagate."""
        batch = self.batch and not one_by_one
        if batch and len(work) > 1 and any(delivery.redelivered for delivery in work):
            return self.each_alone(work)  # a worker may have died on one of them: see watch_for_death
        started = self.watch_for_death(work[0]) if len(work) == 1 and work[0].redelivered else None
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
            delivery = work[0]
            started = recording.forget_started(started, user=self.channel)  # a failure, not a death
            logger.exception("A delivery failed; handing it back to %s unacked", transport.name())
            self.failed += 1
            self.connections_suspect = True
            metrics.FAILED.inc()
            recording.record_failure(delivery=delivery, error=error, worker=self.name, user=self.channel)
            if self.park_if_failed_too_often(delivery):
                return []
            return [(delivery, error)]
        finally:
            # Still alive (done, failed, interrupted): nothing to charge.
            recording.forget_started(started, user=self.channel)

    def each_alone(self, work: list[transport.Delivery]) -> list[tuple[transport.Delivery, Exception]]:
        """A batch's deliveries one at a time, each in a transaction of its own.
        Each ack sent at once, for its own tag: a deferred multiple=True ack
        would also cover a failed neighbour not yet handed back."""
        flush, self.flush_acks = self.flush_acks, True
        try:
            return [failure for delivery in work for failure in self.try_process([delivery], one_by_one=True)]
        finally:
            self.flush_acks = flush

    def watch_for_death(self, delivery: transport.Delivery) -> int | None | bool:
        """Before a redelivered delivery runs: a worker may have died on it
        (os._exit, a segfault, the OOM killer), and the broker returns every
        delivery the dead worker held, not only the one it was running. So a
        redelivery runs alone, after a committed "started" failure record
        (recording.record_started) that only its own death leaves behind: the
        culprit's deaths add up to Nightjar's delivery limit and it alone is
        parked, its neighbours run. A first delivery pays nothing (the hot
        path); a death on one costs one more run before it is counted.
        Returns the record's id (None: not recorded), or False when the
        delivery was parked instead of run."""
        if self.park_if_failed_too_often(delivery):
            return False
        return recording.record_started(delivery=delivery, worker=self.name, user=self.channel)

    def park_if_failed_too_often(self, delivery: transport.Delivery) -> bool:
        """Nightjar's own delivery limit (recording.park_after_failures): the
        park is committed first, then the delivery acked. False when the
        limit is not reached, or the database cannot say (hand it back)."""
        try:
            code = recording.park_after_failures(delivery=delivery, user=self.channel)
        except DatabaseError:
            logger.warning("Could not count the failed attempts; handing the delivery back", exc_info=True)
            return False
        if code is None:
            return False
        self.consumer.ack(delivery.tag)
        self.say(
            f"Parked {code}: its delivery failed {conf.NIGHTJAR_DELIVERY_LIMIT} times "
            "(the delivery limit); see `parked`."
        )
        return True

    def record_lost(self) -> None:
        """Entries the broker dropped before they were handled: one line for
        the terminal, one record for staff; reconcile republishes them."""
        while self.consumer.lost:
            entry = self.consumer.lost.pop(0)
            recording.record_lost_entry(entry=entry, worker=self.name, user=self.channel)
            self.say(f"{transport.name()} entry {entry} was trimmed before it was handled; reconcile republishes it.")

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

    def beat(self) -> None:
        """The loop is running: touch the health file (at most once a second)
        and rewrite this worker's report (every NIGHTJAR_WORKER_REPORT_SECONDS)."""
        now = time.monotonic()
        every = conf.NIGHTJAR_WORKER_REPORT_SECONDS
        # Never inside the handler's transaction (a learner paused there): the row would wait for its commit.
        if every and now - self.last_report >= every and not connection.in_atomic_block:
            self.report()
        if self.health_file is None or now - self.last_beat < 1.0:
            return
        self.last_beat = now
        try:
            self.health_file.touch()
        except OSError as error:
            logger.warning("Could not touch the health file %s: %s", self.health_file, error)

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
        recording.report_worker(name=self.name, fields=fields, stopped=stopped, starting=starting, user=self.channel)

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
