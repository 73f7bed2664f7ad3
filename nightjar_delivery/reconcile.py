"""Reconcile and parking, the engine's half: what brings a stored intent back
to the broker when its publish was lost or its delivery was dead-lettered,
and what staff do with a parked delivery. The channel answers only what is
its domain (nightjar_delivery/channel.py): which intents are pending, how one is
published, its labels, and its refusals.

- reconcile(): collect the dead letters first (so a parked intent is never
  republished behind staff's back), then republish pending intents older
  than the grace period, oldest first, in passes of `limit` while each pass
  is full (bounded by max_seconds).
- collect_dead_letters(): the dead-letter queue into the records, one
  message at a time: record, commit, then ack.
- requeue_parked() / discard_parked(): staff's two answers to a parked
  intent (the intent itself: a caller holding a label asks channel.find()
  first); a requeue calls the channel's on_requeue(intent) in its
  transaction. Parking itself has one path: recording.park().
- parked_lines(): what `parked` lists.
"""

import contextlib
import logging
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.utils import timezone

from nightjar_delivery import metrics, recording, transport
from nightjar_delivery.channel import Channel
from nightjar_delivery.codec import ContractError

logger = logging.getLogger(__name__)


@dataclass
class CollectReport:
    parked: list[str] = field(default_factory=list)  # labels
    requeued: list[str] = field(default_factory=list)
    dropped: int = 0  # already done (or not to be delivered again): nothing to collect
    rejected: int = 0  # broke the contract: recorded as rejected messages


@dataclass
class ReconcileReport:
    published: list[str] = field(default_factory=list)  # labels
    remaining: int = 0
    passes: int = 0
    collected: CollectReport = field(default_factory=CollectReport)  # the dead letters collected first


RECONCILE_ACTOR = "nightjar (reconcile)"

# An intent whose delivery limit was used up by interruptions alone (no
# failure recorded: Ctrl+C at a checkpoint, restarted or killed workers) is
# published again this many times before it is parked anyway: a message that
# kills the worker outright records no failure either. Each such republish
# leaves a parked record marked automatic_requeue, which counts them.
REPUBLISHES_AFTER_INTERRUPTIONS = 1


def reconcile(
    channel: Channel,
    *,
    limit: int = 100,
    older_than: float = 60,
    catch_up: bool = True,
    max_seconds: float = 300,
    actor: str = RECONCILE_ACTOR,
) -> ReconcileReport:
    """Republish the channel's pending intents older than the grace period,
    oldest first, `limit` per pass, after collecting its dead letters. With
    catch_up, passes repeat while each one is full, so a backlog drains as
    fast as the broker confirms (each publish waits for its confirm) —
    bounded by max_seconds. Raises BrokerError when the broker stops
    confirming; what was published stays published, and each republish is in
    the intent's history (channel.republished, one statement per pass)."""
    report = ReconcileReport(collected=collect_dead_letters(channel))
    # Published again by the collection just now: one publish per intent per pass.
    collected = set(report.collected.requeued)
    cutoff = timezone.now() - timedelta(seconds=older_than)
    started = time.monotonic()
    after = None  # keyset cursor: the last intent published, oldest first
    while True:
        intents = channel.pending(stored_before=cutoff, after=after, limit=limit)
        published = []
        try:
            for intent in intents:
                if channel.label(intent.pk) in collected:
                    continue
                channel.publish(intent)
                report.published.append(channel.label(intent.pk))
                published.append(intent)
        finally:
            channel.republished(published, actor=actor, older_than=older_than)
        report.passes += 1
        if intents:
            after = intents[-1]
        if not catch_up or len(intents) < limit or time.monotonic() - started > max_seconds:
            break
    report.remaining = channel.pending_count(stored_before=cutoff, after=after)
    return report


def collect_dead_letters(channel: Channel, *, limit: int = 1000) -> CollectReport:
    """Move what the broker dead-lettered from the channel's queue into the
    records, one message at a time: record, commit, then ack. An intent with
    recorded failures is parked for staff with the last error as its reason;
    one whose limit was used up by interruptions only is published again
    (once); a body that breaks the contract becomes a rejected message; an
    intent that is settled by now (channel.settled) needs nothing."""
    report = CollectReport()
    consumer = transport.Consumer(queue=channel.queue)
    try:
        for _ in range(limit):
            delivery = consumer.get(dead=True)
            if delivery is None:
                break
            republish = _collect_one(channel, delivery, report)
            if republish is not None:
                channel.publish(republish)
            consumer.ack(delivery.tag)
    finally:
        consumer.close()
    return report


def _collect_one(channel: Channel, delivery: transport.Delivery, report: CollectReport) -> Any:
    """Record one dead letter; return the intent to publish again, if any.
    A body it cannot use is recorded as rejected and acked: one bad body
    never stops the pass (nor the publishes of the reconcile behind it)."""
    try:
        message = channel.decode(delivery.body)
        key = channel.intent_id(message)
        channel.check_stored(message, channel.stored([key]).get(key, (None,))[0])
    except Exception as error:
        if not isinstance(error, ContractError):  # the channel's promise is a ContractError: say what broke it
            logger.exception("A dead letter on %s could not be checked; recorded as rejected", channel.queue)
            error = ContractError(f"The body could not be checked ({type(error).__name__}: {error})"[:300])
        with transaction.atomic():
            recording.record_rejection(delivery=delivery, reason=str(error), channel=channel)
        report.rejected += 1
        return None
    mine = {channel.intent_field: key}
    if channel.settled(key) or channel.parked_model.objects.holding().filter(**mine).exists():
        report.dropped += 1  # done, or parked already (one parked record per intent): nothing to collect
        return None
    failure = channel.failure_model.objects.filter(**mine).first()  # the newest
    republished = channel.parked_model.objects.filter(**mine, automatic_requeue=True).count()
    intent = channel.intent_model._default_manager.get(pk=key)
    with transaction.atomic():
        if failure is None and republished < REPUBLISHES_AFTER_INTERRUPTIONS:
            reason = f"returned {delivery.attempts} times without a recorded failure (interrupted or restarted workers)"
            recording.park(
                intent,
                reason=reason,
                attempts=delivery.attempts,
                body=delivery.body,
                channel=channel,
                automatic_requeue=True,
            )
            report.requeued.append(channel.label(key))
            return intent
        if failure is not None:
            reason = f"{failure.error} (worker {failure.worker}, {failure.at:%Y-%m-%d %H:%M:%S})"
        else:
            reason = f"returned {delivery.attempts} times again without a recorded failure: did the worker die on it?"
        died = recording.deaths(recording.failures_since_parked(key, channel=channel))
        recording.park(
            intent, reason=reason, attempts=delivery.attempts, body=delivery.body, channel=channel, deaths=died
        )
        report.parked.append(channel.label(key))
    return None


def requeue_parked(channel: Channel, intent: Any, *, actor: str) -> Any:
    """Staff: publish a parked intent again. In one transaction: the parked
    record resolved, the staff trail (channel.record_staff_action), the
    channel's own reset (channel.on_requeue, e.g. a failed task made ready
    with a fresh retry budget); published after the commit. It counts as
    pending again (reconcile may pick it up too; the handler makes no second
    outcome). Returns the intent; raises the channel's refusal."""
    channel.refuse_republish(intent, "requeued")
    with transaction.atomic():
        held = channel.parked_model.objects.holding().select_for_update().filter(**{channel.intent_field: intent})
        if not held.exists():
            raise channel.refusal(f"{channel.label(intent.pk)} is not parked.")
        held.update(resolution=channel.parked_model.REQUEUED, resolved_by=actor[:150], resolved_at=timezone.now())
        channel.record_staff_action(actor=actor, action="requeue", intent=intent, detail="Requeued a parked delivery.")
        channel.on_requeue(intent)
        publish_on_commit(channel, intent)
    return intent


def discard_parked(channel: Channel, intent: Any, *, actor: str) -> Any:
    """Staff: give up on a parked intent. It stays parked (no outcome,
    reconcile leaves it alone) and leaves the list of what waits for staff.
    Returns the intent; raises the channel's refusal."""
    with transaction.atomic():
        waiting = channel.parked_model.objects.select_for_update().filter(
            **{channel.intent_field: intent}, resolution=""
        )
        if not waiting.exists():
            raise channel.refusal(f"{channel.label(intent.pk)} has no parked delivery waiting for staff.")
        waiting.update(resolution=channel.parked_model.DISCARDED, resolved_by=actor[:150], resolved_at=timezone.now())
        channel.record_staff_action(actor=actor, action="discard", intent=intent, detail="Discarded a parked delivery.")
    return intent


def publish_on_commit(channel: Channel, intent: Any, *, wait: bool = True) -> None:
    """Publish a new (or requeued) intent, whose row the caller writes in its
    transaction, when that transaction commits: the one way the product
    publishes. Where the queue is rows of the intent's own database (the
    database transport) the message is written now, in that transaction, and
    commits with the intent or not at all: one commit, and nothing left for
    reconcile in between. Elsewhere publish_after_commit() runs after the
    commit (at once outside a transaction). A failed publish is logged and
    left for reconcile either way; the caller's transaction goes on."""
    using, joins = _intent_database(channel)
    if joins and transaction.get_connection(using).in_atomic_block:
        try:
            channel.publish(intent)  # (the database transport's INSERT: a savepoint of its own)
        except transport.BrokerError as error:
            _left_for_reconcile(channel, intent.pk, error)
        return
    transaction.on_commit(lambda: publish_after_commit(channel, intent, wait=wait), using=using)


def publish_transaction(channel: Channel) -> AbstractContextManager[Any]:
    """Around writing a new intent and its publish_on_commit() when the
    caller may be outside a transaction (a task's enqueue): one transaction
    where the publish joins it (see publish_on_commit), so the row and its
    message commit together; inside the caller's transaction that one, with no
    savepoint of its own (the row is written as it would be without this: a
    savepoint would cost PostgreSQL two round trips for nothing); elsewhere
    nothing of its own (the publish waits for the row's commit anyway, and a
    transaction would cost PostgreSQL a round trip more)."""
    using, joins = _intent_database(channel)
    return transaction.atomic(using=using, savepoint=False) if joins else contextlib.nullcontext()


def _intent_database(channel: Channel) -> tuple[str, bool]:
    """The database the channel's intents are written to, and whether a
    publish inside a transaction there joins it (the database transport's
    queue is in it)."""
    using = router.db_for_write(channel.intent_model)
    return using, transport.joins_transactions(using)


def _left_for_reconcile(channel: Channel, key: Any, error: transport.BrokerError) -> None:
    metrics.PUBLISHES_FAILED.inc()
    logger.warning("%s stored but not published; reconcile will publish it: %s", channel.label(key), error)


def publish_after_commit(channel: Channel, intent: Any, *, wait: bool = True) -> None:
    """The intent is already safe in the database, so a failed publish is
    logged and left for reconcile. wait=False: nor does the caller wait for
    the broker's confirm where the transport can publish from a thread of
    its own (Channel.publish_soon): the confirm only shortens the wait before
    the first run, and a failure is logged the same way, from that thread."""
    key = intent.pk

    def left_for_reconcile(error: transport.BrokerError) -> None:
        _left_for_reconcile(channel, key, error)

    if not wait:
        channel.publish_soon(intent, on_failure=left_for_reconcile)
        return
    try:
        channel.publish(intent)
    except transport.BrokerError as error:
        left_for_reconcile(error)


def parked_lines(channel: Channel) -> list[str]:
    """One line per parked delivery waiting for staff."""
    column = f"{channel.intent_field}_id"
    nothing = f"(no {channel.intent_model._meta.verbose_name})"
    lines = []
    for parked in channel.parked_model.objects.filter(resolution=""):
        intent_id = getattr(parked, column)
        label = channel.label(intent_id) if intent_id else nothing
        lines.append(
            f"{label}  parked {parked.parked:%Y-%m-%d %H:%M:%S}  after {parked.attempts} deliveries  {parked.reason}"
        )
    return lines
