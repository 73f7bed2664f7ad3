"""Seats: the evening's capacity, who has a seat, who waits, cancelling.

Every seat decision takes the evening's row lock first (on PostgreSQL
SELECT ... FOR UPDATE; SQLite's immediate transactions already let one writer
in at a time), counts the seats taken, and decides in the same transaction:
confirmed seats never exceed the capacity, and the waiting list keeps the
order of arrival (the registration's id, given under the lock). A freed seat
goes to the first waiting guest in the transaction that freed it; that
guest's ticket is published after commit like any other (and reconciled if
the publish is lost: reconcile's pending registrations are the confirmed ones).
"""

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from nightjar_delivery import get_channel, publish_on_commit
from tickets import signals
from tickets.models import Evening, Registration, Seat
from tickets.services.evening import capacity, locked_capacity, seats_taken
from tickets.services.registrations import CHANNEL, NightjarError
from tickets.services.staff import record_staff_action

__all__ = ["capacity", "locked_capacity", "seats_taken"]  # the evening's reads, from here too

# More seats than any room this site can fill; a typo (20000000) is refused, not obeyed.
MAX_CAPACITY = 100_000
GUEST_ACTOR = "the guest (registration page)"


class AlreadyCancelled(NightjarError):
    pass


class CapacityRefused(NightjarError):
    pass


def fill_free_seats(limit: int | None, *, actor: str, why: str) -> list[Registration]:
    """Promote waiting guests, first come first served, into the seats left
    under `limit`; publish their tickets after commit. Call with the evening
    locked exclusively, inside the transaction that freed the seats."""
    waiting = Registration.objects.filter(seat=Seat.WAITING).order_by("id")
    if limit is not None:
        waiting = waiting[: max(0, limit - seats_taken())]
    promoted = list(waiting)
    if not promoted:
        return []
    now = timezone.now()
    Registration.objects.filter(pk__in=[r.pk for r in promoted]).update(seat=Seat.CONFIRMED, promoted=now)
    for registration in promoted:
        registration.seat, registration.promoted = Seat.CONFIRMED, now
        record_staff_action(actor=actor, action="promote", registration=registration, detail=why)
        publish_on_commit(get_channel(CHANNEL), registration)
    signals.seats_given.send(sender=Registration, registrations=promoted)
    return promoted


@dataclass
class Cancellation:
    registration: Registration
    promoted: list[Registration]


def cancel_registration(*, registration: Registration, actor: str, reason: str = "") -> Cancellation:
    """Cancel a registration: its seat (or its place on the waiting list) is
    given back, and a freed seat goes to the first waiting guest in the same
    transaction. A ticket already made is void from the commit on (it no
    longer downloads; the door answers it red). Raises AlreadyCancelled."""
    with transaction.atomic():
        limit = locked_capacity(exclusive=True)
        current = Registration.objects.select_for_update().get(pk=registration.pk)
        if current.seat == Seat.CANCELLED:
            raise AlreadyCancelled(f"{current.code} was already cancelled; nothing changed.")
        freed = current.seat == Seat.CONFIRMED
        current.seat, current.cancelled = Seat.CANCELLED, timezone.now()
        current.save(update_fields=["seat", "cancelled"])
        detail = reason.strip() or ("Cancelled by the guest." if actor == GUEST_ACTOR else "Cancelled by staff.")
        record_staff_action(actor=actor, action="cancel", registration=current, detail=detail)
        signals.registration_cancelled.send(sender=Registration, registration=current)
        promoted = fill_free_seats(limit, actor=actor, why=f"Given the seat {current.code} gave back.") if freed else []
    return Cancellation(registration=current, promoted=promoted)


def parse_capacity(text) -> int | None:
    """A capacity as staff type it: a whole number of seats from 1 to
    MAX_CAPACITY, or empty for room for everyone. Raises CapacityRefused."""
    text = "" if text is None else str(text).strip()
    if not text:
        return None
    if not text.isascii() or not text.lstrip("-").isdigit() or len(text) > 12:
        raise CapacityRefused(f"{text[:20]!r} is not a number of seats; type a whole number such as 20.")
    value = int(text)
    if value < 1:
        raise CapacityRefused(
            "The evening needs at least one seat; leave the capacity empty for room for everyone, "
            "or cancel registrations to close it."
        )
    if value > MAX_CAPACITY:
        raise CapacityRefused(f"{value} seats is more than this site can seat (at most {MAX_CAPACITY}).")
    return value


def set_capacity(*, capacity: int | None, actor: str) -> list[Registration]:
    """Staff: set the evening's capacity (None: room for everyone). Raising it
    promotes waiting guests in order, in the same transaction; lowering it
    below the seats taken is refused. Returns the promoted registrations."""
    if capacity is not None:
        capacity = parse_capacity(capacity)
    with transaction.atomic():
        before = locked_capacity(exclusive=True)
        taken = seats_taken()
        if capacity is not None and capacity < taken:
            raise CapacityRefused(
                f"{taken} seats are taken, so the capacity cannot be {capacity}; "
                f"choose at least {taken}, or cancel registrations first."
            )
        Evening.objects.filter(pk=1).update(capacity=capacity)
        shown = "room for everyone" if capacity is None else f"{capacity} seats"
        was = "room for everyone" if before is None else f"{before} seats"
        record_staff_action(actor=actor, action="capacity", registration=None, detail=f"Capacity {was} → {shown}.")
        promoted = fill_free_seats(capacity, actor=actor, why=f"A seat opened: capacity set to {shown}.")
    return promoted


def waiting_place(registration: Registration) -> int | None:
    """1 for the first waiting guest; None for one who is not waiting."""
    if registration.seat != Seat.WAITING:
        return None
    return Registration.objects.filter(seat=Seat.WAITING, pk__lt=registration.pk).count() + 1


@dataclass
class SeatCounts:
    capacity: int | None
    confirmed: int
    waiting: int
    cancelled: int

    @property
    def free(self) -> int | None:
        return None if self.capacity is None else max(0, self.capacity - self.confirmed)


def seat_counts() -> SeatCounts:
    counts = Registration.objects.aggregate(
        confirmed=Count("pk", filter=Q(seat=Seat.CONFIRMED)),
        waiting=Count("pk", filter=Q(seat=Seat.WAITING)),
        cancelled=Count("pk", filter=Q(seat=Seat.CANCELLED)),
    )
    return SeatCounts(capacity=capacity(), **counts)


@dataclass
class SeatActivity:
    start: object  # the first bucket's start (a datetime)
    cancelled: list[int]
    promoted: list[int]


def seat_activity(*, window, bucket_seconds: int) -> SeatActivity:
    """Cancellations and promotions per bucket over the window (the desk's
    chart): read from the registrations' own times, a few rows an evening."""
    now = timezone.now()
    start = now - window
    count = int(window.total_seconds() // bucket_seconds)
    cancelled, promoted = [0] * count, [0] * count
    for field, values in (("cancelled", cancelled), ("promoted", promoted)):
        for moment in Registration.objects.filter(**{f"{field}__gte": start}).values_list(field, flat=True):
            index = min(count - 1, int((moment - start).total_seconds() // bucket_seconds))
            values[index] += 1
    return SeatActivity(start=start, cancelled=cancelled, promoted=promoted)
