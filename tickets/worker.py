"""The consume loop around the handler: take a delivery, check it against the
contract and the stored registration, run the handler, and never ack on an
error. One delivery at a time (`take_one`), until empty (`drain`), or as a
service until SIGTERM (`serve`), finishing the current delivery first.
"""

import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import TextIO

from django.db import close_old_connections, transaction

from tickets import broker, contract, services
from tickets.checkpoints import Pause
from tickets.models import Registration

logger = logging.getLogger(__name__)

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
    ) -> None:
        self.handler = handler
        self.pause = pause
        self.stdout = stdout or sys.stdout
        self.prefetch = prefetch
        self.reconcile_every = reconcile_every
        self.consumer: broker.Consumer | None = None
        self.shutdown = False
        self.handled = 0
        self.rejected = 0

    def say(self, line: str) -> None:
        # Flushed at once: learners and tests read these lines as they happen.
        self.stdout.write(line + "\n")
        self.stdout.flush()

    def connect(self) -> None:
        self.consumer = broker.Consumer(prefetch=self.prefetch)
        if self.pause is not None:
            self.pause.keepalive = self.consumer.keepalive

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def take_one(self) -> bool:
        """Process one ready delivery; False when nothing was ready."""
        delivery = self.consumer.get()
        if delivery is None:
            return False
        self.process(delivery)
        return True

    def process(self, delivery: broker.Delivery) -> None:
        """Check one delivery, then run the handler or record the rejection.
        Raises on a database error, leaving the delivery unacked."""
        close_old_connections()
        try:
            message = self.check(delivery)
        except contract.ContractError as error:
            self.reject(delivery, str(error))
            return
        self.say(f"Received {message.code} redelivered={delivery.redelivered}")
        self.handler(message, lambda: self.consumer.ack(delivery.tag), self.pause)
        self.handled += 1
        self.say("Handler returned.")

    def check(self, delivery: broker.Delivery) -> contract.Message:
        """The contract, then the stored registration: a body that names an
        unknown registration or another name is not a repeat of anything."""
        message = contract.decode(delivery.body)
        stored = Registration.objects.filter(pk=message.registration_id).values_list("name", flat=True).first()
        if stored is None:
            raise contract.ContractError(f"There is no registration {message.code}.")
        if stored != message.name:
            raise contract.ContractError(f"The name does not match the stored registration {message.code}.")
        return message

    def reject(self, delivery: broker.Delivery, reason: str) -> None:
        # Commit the record first; only then may RabbitMQ forget the delivery.
        with transaction.atomic():
            record = services.record_rejection(delivery=delivery, reason=reason)
        self.consumer.ack(delivery.tag)
        self.rejected += 1
        already = "" if record is not None else " (already recorded)"
        self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}{already}")

    def drain(self) -> int:
        count = 0
        while not self.shutdown and self.take_one():
            count += 1
        return count

    def serve(self) -> None:
        """Consume until SIGTERM/SIGINT, reconnecting with backoff when
        RabbitMQ goes away. A failed delivery is logged and handed back."""
        self.install_signal_handlers()
        backoff = 1.0
        last_reconcile = time.monotonic()
        while not self.shutdown:
            try:
                self.connect()
                self.say(f"Serving {broker.queue_name()} (prefetch {self.prefetch}); stop with Ctrl+C or SIGTERM.")
                backoff = 1.0
                for delivery in self.consumer.consume(idle_seconds=0.5):
                    if delivery is not None:
                        self.process_or_hand_back(delivery)
                    if self.reconcile_every and time.monotonic() - last_reconcile >= self.reconcile_every:
                        last_reconcile = time.monotonic()
                        self.reconcile()
                    if self.shutdown:
                        self.consumer.stop_consuming()
                        break
            except broker.BrokerError as error:
                if self.shutdown:
                    break
                logger.warning("%s; reconnecting in %.0f s", error, backoff)
                self.say(f"RabbitMQ is unavailable; reconnecting in {backoff:.0f} s.")
                self.close()
                self.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX)
            finally:
                self.close()
        self.say(f"Stopped after {self.handled} deliveries.")

    def process_or_hand_back(self, delivery: broker.Delivery) -> None:
        try:
            self.process(delivery)
        except broker.BrokerError:
            raise
        except Exception:
            logger.exception("Delivery %s failed; handing it back to RabbitMQ unacked", delivery.tag)
            self.sleep(RETRY_PAUSE, keepalive=True)
            self.consumer.requeue(delivery.tag)

    def reconcile(self) -> None:
        try:
            published, remaining = services.reconcile_registrations()
        except Exception:
            logger.exception("Reconcile failed; trying again at the next interval")
            return
        if published:
            self.say(f"Reconcile republished {len(published)}; {remaining} remain.")

    def sleep(self, seconds: float, *, keepalive: bool = False) -> None:
        """Sleep in short slices, waking for shutdown (and heartbeats)."""
        deadline = time.monotonic() + seconds
        while not self.shutdown and time.monotonic() < deadline:
            if keepalive and self.consumer is not None:
                self.consumer.keepalive(0.2)
            else:
                time.sleep(0.2)

    def install_signal_handlers(self) -> None:
        def stop(signum, frame):
            if self.pause is not None and self.pause.waiting:
                raise KeyboardInterrupt  # Ctrl+C at a checkpoint: leave now, unacked.
            if not self.shutdown:
                self.say(f"{signal.Signals(signum).name} received; finishing the current delivery, then stopping.")
            self.shutdown = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
