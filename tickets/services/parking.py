"""Parking: what the broker dead-lettered is moved into the database (parked
for staff, published again once, or rejected), and staff requeue or discard
what is parked."""

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from delivery import conf, recording, transport
from delivery.recording import record_rejection
from tickets import contract
from tickets.models import ParkedDelivery, Registration
from tickets.services.registrations import (
    NightjarError,
    find_registration,
    has_key,
    has_ticket,
    publish_after_commit,
    publish_registration,
    refuse_ticket_without_key,
)
from tickets.services.staff import record_staff_action


@dataclass
class CollectReport:
    parked: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    dropped: int = 0
    rejected: int = 0


# A registration whose delivery limit was used up by interruptions alone (no
# failure recorded: Ctrl+C at a checkpoint, restarted or killed workers) is
# published again this many times before it is parked anyway: a message that
# kills the worker outright records no failure either.
AUTOMATIC_REQUEUES = 1


SYSTEM_ACTOR = "nightjar (dead-letter collector)"


def collect_dead_letters(*, limit: int = 1000) -> CollectReport:
    """Move what the broker dead-lettered into the database, one message at a
    time: record, commit, then ack. A registration with recorded failures is
    parked for staff with the last error as its reason; one whose limit was
    used up by interruptions only is published again (once); a body that
    breaks the contract becomes a RejectedMessage; a registration that has its
    ticket by now needs nothing."""
    report = CollectReport()
    consumer = transport.Consumer(queue=conf.NIGHTJAR_QUEUE)
    try:
        for _ in range(limit):
            delivery = consumer.get(dead=True)
            if delivery is None:
                break
            republish = _collect_one(delivery, report)
            if republish is not None:
                publish_registration(republish)
            consumer.ack(delivery.tag)
    finally:
        consumer.close()
    return report


def _collect_one(delivery: transport.Delivery, report: CollectReport) -> Registration | None:
    """Record one dead letter; return the registration to publish again, if any."""
    try:
        message = contract.decode(delivery.body)
        registration = Registration.objects.filter(pk=message.registration_id).first()
        contract.check_stored(message, registration.name if registration else None)
    except contract.ContractError as error:
        with transaction.atomic():
            record_rejection(delivery=delivery, reason=str(error))
        report.rejected += 1
        return None
    # Done, or a ticket without its key (publishing it again would make a
    # second ticket; audit reports it, repair adds the key): nothing to collect.
    if Registration.objects.filter(Q(has_key()) | Q(has_ticket()), pk=registration.pk).exists():
        report.dropped += 1
        return None
    failure = registration.delivery_failures.first()
    automatic = registration.parked_deliveries.filter(resolved_by=SYSTEM_ACTOR).count()
    with transaction.atomic():
        if failure is None and automatic < AUTOMATIC_REQUEUES:
            reason = f"returned {delivery.attempts} times without a recorded failure (interrupted or restarted workers)"
            _park(registration, delivery, reason, resolution=ParkedDelivery.REQUEUED)
            report.requeued.append(registration.code)
            return registration
        if failure is not None:
            reason = f"{failure.error} (worker {failure.worker}, {failure.at:%Y-%m-%d %H:%M:%S})"
        else:
            reason = f"returned {delivery.attempts} times again without a recorded failure: did the worker die on it?"
        _park(registration, delivery, reason)
        report.parked.append(registration.code)
    return None


def _park(registration, delivery, reason: str, *, resolution: str = "") -> ParkedDelivery:
    return recording.park(
        registration, delivery, reason, resolution=resolution, resolved_by=SYSTEM_ACTOR if resolution else ""
    )


def requeue_parked(*, code: str, actor: str) -> Registration:
    """Staff: publish a parked registration again. It counts as pending again
    (reconcile may pick it up too; the worker makes no second ticket)."""
    registration = find_registration(code=code)
    refuse_ticket_without_key(registration, "requeued")
    with transaction.atomic():
        held = ParkedDelivery.objects.holding().select_for_update().filter(registration=registration)
        if not held.exists():
            raise NightjarError(f"{registration.code} is not parked.")
        held.update(resolution=ParkedDelivery.REQUEUED, resolved_by=actor[:150], resolved_at=timezone.now())
        record_staff_action(
            actor=actor, action="requeue", registration=registration, detail="Requeued a parked delivery."
        )
        transaction.on_commit(lambda: publish_after_commit(registration))
    return registration


def discard_parked(*, code: str, actor: str) -> Registration:
    """Staff: give up on a parked registration. It stays parked (no ticket,
    reconcile leaves it alone) and leaves the list of what waits for staff."""
    registration = find_registration(code=code)
    with transaction.atomic():
        waiting = ParkedDelivery.objects.select_for_update().filter(registration=registration, resolution="")
        if not waiting.exists():
            raise NightjarError(f"{registration.code} has no parked delivery waiting for staff.")
        waiting.update(resolution=ParkedDelivery.DISCARDED, resolved_by=actor[:150], resolved_at=timezone.now())
        record_staff_action(
            actor=actor, action="discard", registration=registration, detail="Discarded a parked delivery."
        )
    return registration
