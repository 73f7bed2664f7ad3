"""When a delivery fails or kills its worker: handed back unacked after a
pause, a failed batch retried one delivery at a time, a redelivery run alone
after a committed "started" record (a death is charged to its culprit),
parking at Nightjar's delivery limit, and entries the broker dropped."""

import logging

from django.db import DatabaseError

from nightjar_delivery import conf, metrics, recording, transport

logger = logging.getLogger("nightjar_delivery.worker")  # the name its log lines always carried

# After a failed delivery, wait this long before handing it back, so a worker
# facing a locked or unavailable database does not spin through redeliveries.
RETRY_PAUSE = 2.0


class Failures:
    """A Worker's failures. Owns the counts failed and handed_back; runs
    process (Handling) and sleeps with the loop's sleep."""

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
            started = recording.forget_started(started, channel=self.channel)  # a failure, not a death
            logger.exception("A delivery failed; handing it back to %s unacked", transport.name())
            self.failed += 1
            self.connections_suspect = True
            metrics.FAILED.inc()
            recording.record_failure(delivery=delivery, error=error, worker=self.name, channel=self.channel)
            if self.park_if_failed_too_often(delivery):
                return []
            return [(delivery, error)]
        finally:
            # Still alive (done, failed, interrupted): nothing to charge.
            recording.forget_started(started, channel=self.channel)

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
        return recording.record_started(delivery=delivery, worker=self.name, channel=self.channel)

    def park_if_failed_too_often(self, delivery: transport.Delivery) -> bool:
        """Nightjar's own delivery limit (recording.park_after_failures): the
        park is committed first, then the delivery acked. False when the
        limit is not reached, or the database cannot say (hand it back)."""
        try:
            code = recording.park_after_failures(delivery=delivery, channel=self.channel)
        except DatabaseError:
            logger.warning("Could not count the failed attempts; handing the delivery back", exc_info=True)
            return False
        if code is None:
            return False
        self.consumer.ack(delivery.tag)
        self.say(
            f"Parked {code}: its delivery failed {conf.NIGHTJAR_DELIVERY_LIMIT} times "
            "(the delivery limit); see `nightjar_parked`."
        )
        return True

    def record_lost(self) -> None:
        """Entries the broker dropped before they were handled: one line for
        the terminal, one record for staff; reconcile republishes them."""
        while self.consumer.lost:
            entry = self.consumer.lost.pop(0)
            recording.record_lost_entry(entry=entry, worker=self.name, channel=self.channel)
            self.say(f"{transport.name()} entry {entry} was trimmed before it was handled; reconcile republishes it.")
