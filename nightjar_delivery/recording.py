"""What the worker writes down besides the handler's work: rejected bodies,
failed attempts, redeliveries, entries the broker lost, and its own report.
Into the user's concrete record models (nightjar_delivery/records.py, named by the
channel), each row linked to its intent when the body names one that exists.
Only a rejection is part of a delivery's outcome (recorded, then acked); the
rest is best effort: a worker never stops because a note could not be written.
Each function takes the channel whose records it writes (`channel=`, required:
a process may serve several channels, the web and reconcile do, and a record
in another channel's tables would be silently wrong)."""

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from nightjar_delivery import conf
from nightjar_delivery.channel import Channel
from nightjar_delivery.codec import storable_text
from nightjar_delivery.transport import Delivery

logger = logging.getLogger(__name__)

# Who resolved a parked record the dead-letter collector published again (shown to staff).
COLLECTOR = "nightjar (dead-letter collector)"


def _intent(channel: Channel, intent_id: int | None) -> Any:
    """The stored intent a body claims, or None."""
    return channel.intent_model._default_manager.filter(pk=intent_id).first() if intent_id else None


def record_rejection(*, delivery: Delivery, reason: str, channel: Channel) -> Any:
    """Record a delivery that broke the contract. Total: whatever the bytes,
    the row is storable (excerpt and message id escaped, size and hash of the
    raw body kept). A redelivery of a body that is already recorded is not
    recorded again (returns None)."""
    rejected = channel.rejected_model
    digest = hashlib.sha256(delivery.body).hexdigest()
    if delivery.redelivered and rejected.objects.filter(body_sha256=digest).exists():
        return None
    return rejected.objects.create(
        reason=storable_text(reason, max_bytes=4 * rejected.MAX_REASON)[: rejected.MAX_REASON],
        body_excerpt=storable_text(delivery.body[: rejected.MAX_EXCERPT], max_bytes=rejected.MAX_EXCERPT),
        body_sha256=digest,
        body_size=len(delivery.body),
        message_id=storable_text(delivery.message_id, max_bytes=200)[:200],
        redelivered=delivery.redelivered,
        **{channel.intent_field: _intent(channel, channel.claimed_id(delivery.body))},
    )


def record_failure(*, delivery: Delivery, error: BaseException, worker: str, channel: Channel) -> None:
    """Note a failed attempt (best effort: the database may be what failed)."""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    try:
        with transaction.atomic():
            channel.failure_model.objects.create(
                worker=worker[:100],
                error=storable_text(f"{type(error).__name__}: {first_line}", max_bytes=1200)[:300],
                **{channel.intent_field: _intent(channel, channel.claimed_id(delivery.body))},
            )
    except Exception:
        logger.warning("Could not record the failed attempt (the database may be what failed)", exc_info=True)


# What a "started" record says while its worker runs the delivery, and
# what it keeps saying if the worker dies on it (worker.watch_for_death).
DIED = "The worker died while handling it (killed, crashed or out of memory)"


def record_started(*, delivery: Delivery, worker: str, channel: Channel) -> int | None:
    """Before a redelivery runs: a failed attempt, committed now and deleted
    (forget_started) as soon as the worker is done with it, whatever the
    outcome. Only a worker that dies on the delivery leaves it: that death
    is charged to this intent alone. Its id, or None (best effort)."""
    try:
        with transaction.atomic():
            row = channel.failure_model.objects.create(
                worker=worker[:100],
                error=DIED,
                **{channel.intent_field: _intent(channel, channel.claimed_id(delivery.body))},
            )
    except Exception:
        logger.warning("Could not note the start of a redelivery", exc_info=True)
        return None
    return row.pk


def forget_started(pk: int | None, *, channel: Channel) -> None:
    """The worker lived through the delivery: its "started" record goes.
    Returns None (for `started = forget_started(started)`)."""
    if pk is None:
        return None
    try:
        channel.failure_model.objects.filter(pk=pk).delete()
    except Exception:
        logger.warning("Could not delete the start record %s of a redelivery", pk, exc_info=True)
    return None


def record_lost_entry(*, entry: str, worker: str, channel: Channel) -> None:
    """A delivery the broker dropped before it was handled (a Redis entry
    trimmed while pending): its body is gone, so which intent it was is
    unknown; reconcile republishes whatever is pending. Staff see it with
    the failed attempts (best effort, like them)."""
    try:
        channel.failure_model.objects.create(
            worker=worker[:100],
            error=f"Entry {entry} of {channel.queue} was trimmed before it was handled"[:300],
            **{channel.intent_field: None},
        )
    except Exception:
        logger.warning("Could not record the trimmed entry %s", entry, exc_info=True)


def record_redeliveries(*, deliveries: list[tuple[int | None, int]], worker: str, channel: Channel) -> None:
    """(intent key, delivery number) of deliveries the broker sent before.
    Best effort, one statement; the intent may be unknown (rejected)."""
    if not deliveries:
        return
    known = set(
        channel.intent_model._default_manager.filter(pk__in={pk for pk, _ in deliveries if pk}).values_list(
            "pk", flat=True
        )
    )
    column = f"{channel.intent_field}_id"
    try:
        channel.redelivery_model.objects.bulk_create(
            channel.redelivery_model(worker=worker[:100], delivery=number, **{column: pk if pk in known else None})
            for pk, number in deliveries
        )
    except DatabaseError:
        logger.warning("Could not record %d redeliveries", len(deliveries), exc_info=True)


def report_worker(
    *, name: str, fields: dict[str, Any], stopped: bool = False, starting: bool = False, channel: Channel
) -> None:
    """Write a worker's row (best effort: a worker never stops for its report).
    A worker starting also deletes the rows of workers not seen for
    NIGHTJAR_WORKER_REPORT_DAYS: every process leaves one, restarts add up."""
    reports = channel.worker_report_model
    now = timezone.now()
    defaults = {**fields, "last_seen": now, "stopped": now if stopped else None}
    try:
        reports.objects.update_or_create(name=name[:100], defaults=defaults)
        if starting and conf.NIGHTJAR_WORKER_REPORT_DAYS:
            forgotten = now - timedelta(days=conf.NIGHTJAR_WORKER_REPORT_DAYS)
            reports.objects.filter(last_seen__lt=forgotten).delete()
    except DatabaseError:
        logger.warning("Could not write the report of worker %s", name, exc_info=True)


def park(
    intent: Any,
    *,
    reason: str,
    attempts: int,
    channel: Channel,
    body: bytes | None = None,
    excerpt: str = "",
    automatic_requeue: bool = False,
    deaths: int = 0,
):
    """The one way an intent is parked for staff (atomic: in the caller's
    transaction when there is one): the worker's delivery limit, the dead-letter collector and
    a user's own limit (the tasks' attempts) all come here. body: the
    delivery's, kept as an excerpt and a hash; without one, excerpt says what
    the intent was (e.g. a task's path). automatic_requeue: not parked but
    published again once by the collector (resolved as requeued by it, and
    counted by this field). deaths: how many of the attempts were its
    worker dying on it. The channel hears of a park (on_park) in the same
    transaction."""
    if body is not None:
        excerpt, digest = storable_text(body[:2048], max_bytes=2048), hashlib.sha256(body).hexdigest()
    else:
        excerpt, digest = storable_text(excerpt, max_bytes=2048), ""
    with transaction.atomic():  # the hook (which may lock the intent's row) and the record: together
        if not automatic_requeue:
            channel.on_park(intent, reason=reason, deaths=deaths)
        return channel.parked_model.objects.create(
            reason=storable_text(reason, max_bytes=1200)[:300],
            attempts=attempts,
            body_excerpt=excerpt,
            body_sha256=digest,
            resolution=channel.parked_model.REQUEUED if automatic_requeue else "",
            resolved_by=COLLECTOR if automatic_requeue else "",
            resolved_at=timezone.now() if automatic_requeue else None,
            automatic_requeue=automatic_requeue,
            **{channel.intent_field: intent},
        )


def failures_since_parked(intent_id: int, *, channel: Channel) -> "QuerySet[Any]":
    """The failures recorded for an intent since it was last parked, newest first."""
    mine = {channel.intent_field: intent_id}
    parked_times = channel.parked_model.objects.filter(**mine).order_by("-parked").values_list("parked", flat=True)
    last_parked = parked_times.first()
    failures = channel.failure_model.objects.filter(**mine)  # newest first
    if last_parked is not None:
        failures = failures.filter(at__gt=last_parked)
    return failures


def deaths(failures: "QuerySet[Any]") -> int:
    """How many of these failures were the worker dying on the delivery (record_started's records left behind)."""
    return failures.filter(error=DIED).count()


def park_after_failures(*, delivery: Delivery, channel: Channel) -> str | None:
    """The worker's own delivery limit, whatever the broker counts (RabbitMQ
    4.3 counts only rejects, 3.10 every return, Redis its own counter): once
    the failures recorded for an intent since it was last parked reach
    NIGHTJAR_DELIVERY_LIMIT, park it for staff with the last error. Returns
    the intent's label when it is parked (the caller acks the delivery only
    after this commit), None otherwise (the delivery is handed back)."""
    intent_id = channel.claimed_id(delivery.body)
    if not intent_id:
        return None
    mine = {channel.intent_field: intent_id}
    with transaction.atomic():
        # Locked: two workers failing on two copies of it park it once.
        intent = channel.intent_model._default_manager.select_for_update().filter(pk=intent_id).first()
        if intent is None:
            return None
        if channel.parked_model.objects.holding().filter(**mine).exists():
            return channel.label(intent_id)  # a second copy of what is parked already
        failures = failures_since_parked(intent_id, channel=channel)
        count = failures.count()
        if count < conf.NIGHTJAR_DELIVERY_LIMIT:
            return None
        last = failures.first()
        assert last is not None  # count reached the limit: one failure at least (for any limit above 0)
        reason = f"{last.error} (worker {last.worker}, {last.at:%Y-%m-%d %H:%M:%S}); failed {count} times"
        park(intent, reason=reason, attempts=count, body=delivery.body, channel=channel, deaths=deaths(failures))
    return channel.label(intent_id)
