"""Settle, what becomes of each delivery at the broker: acked after the
handler's commit (at once, or deferred into one multiple ack in service
mode), a rejection acked after its record's commit, a failure recorded and
handed back unacked, a redelivery watched for a worker's death, and parking
at Nightjar's delivery limit; and what a Ctrl+C at a checkpoint did to the
delivery under way."""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, transaction

from nightjar_delivery import conf, metrics, recording, transport
from nightjar_delivery.channel import Channel
from nightjar_delivery.worker.receive import Receiver

logger = logging.getLogger("nightjar_delivery.worker")  # the name its log lines always carried


class Settler:
    """Owns how acks are sent (flush_acks), the delivery under way (current,
    current_acked, on: what the report says the worker is on, or was on
    last) and the counts failed and handed_back. Sends what it settles
    through the receiver."""

    def __init__(self, *, channel: Channel, name: str, receiver: Receiver, say: Callable[[str], None]) -> None:
        self.channel = channel
        self.name = name
        self.receiver = receiver
        self.say = say
        # Queued acks only in service mode without checkpoints: a learner who
        # pauses or kills the worker must find every ack already sent.
        self.flush_acks = True
        self.current: transport.Delivery | None = None  # the delivery the handler is on
        self.current_acked = False
        self.on = ""
        self.failed = 0
        self.handed_back = 0

    # -- acks after the commit --

    def defer_acks(self, defer: bool) -> None:
        """Service mode without checkpoints: acks may wait to go as one."""
        self.flush_acks = not defer

    @contextmanager
    def acks_at_once(self) -> Iterator[None]:
        """Each ack sent at once, for its own tag: a deferred multiple=True ack
        would also cover a failed neighbour not yet handed back."""
        flush, self.flush_acks = self.flush_acks, True
        try:
            yield
        finally:
            self.flush_acks = flush

    def begin(self, delivery: transport.Delivery, on: str) -> None:
        """The handler is about to run on this delivery (its label: on)."""
        self.current, self.current_acked, self.on = delivery, False, on

    def begin_batch(self, on: str) -> None:
        self.on = on

    def ack_current(self, delivery: transport.Delivery) -> None:
        """The handler's ack, called after its commit."""
        self.receiver.ack(delivery.tag, flush=self.flush_acks)
        self.current_acked = True

    def ack_batch(self, deliveries: list[transport.Delivery]) -> Callable[[], None]:
        """The batch handler's ack_all: one ack for the whole batch, after its commit."""
        tags = [delivery.tag for delivery in deliveries]
        return lambda: self.receiver.ack_many(tags, flush=self.flush_acks)

    def reject(self, delivery: transport.Delivery, reason: str) -> None:
        # Commit the record first; only then may the broker forget the delivery.
        with transaction.atomic():
            record = recording.record_rejection(delivery=delivery, reason=reason, channel=self.channel)
        self.receiver.ack(delivery.tag)
        already = "" if record is not None else " (already recorded)"
        self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}{already}")

    # -- failures, deaths, parking --

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

    def forget_started(self, started: int | None) -> None:
        """Still alive (done, failed, interrupted): nothing to charge. Returns None (nothing left to forget)."""
        return recording.forget_started(started, channel=self.channel)

    def fail(self, delivery: transport.Delivery, error: Exception) -> list[tuple[transport.Delivery, Exception]]:
        """A delivery failed (its transaction rolled back): record it, park it
        at the delivery limit (acked), else return it to be handed back."""
        logger.exception("A delivery failed; handing it back to %s unacked", transport.name())
        self.failed += 1
        metrics.FAILED.inc()
        recording.record_failure(delivery=delivery, error=error, worker=self.name, channel=self.channel)
        if self.park_if_failed_too_often(delivery):
            return []
        return [(delivery, error)]

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
        self.receiver.ack(delivery.tag)
        self.say(
            f"Parked {code}: its delivery failed {conf.NIGHTJAR_DELIVERY_LIMIT} times "
            "(the delivery limit); see `nightjar_parked`."
        )
        return True

    def hand_back(self, failed: list[tuple[transport.Delivery, Exception]], *, counted: bool = True) -> None:
        """What failed goes back to the broker unacked (counted: in service mode, for the report)."""
        for delivery, _ in failed:
            self.receiver.requeue(delivery.tag)
            if counted:
                self.handed_back += 1
                metrics.HANDED_BACK.inc()

    # -- what others ask --

    def counts(self) -> dict:
        return {"failed": self.failed, "handed_back": self.handed_back, "current": self.on[:100]}

    def interrupted(self) -> str:
        """What a Ctrl+C at a checkpoint did to the delivery, in one honest sentence."""
        if (self.current is not None and self.current_acked) or self.receiver.acked_within(self.current):
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
