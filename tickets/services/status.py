"""Status: each registration's state, the totals per state with the queue's
depth, and the gauges a metrics scrape reads. What is not about
registrations (the queue's counts, the replicas, the dependencies' health)
is the engine's: nightjar_delivery/health.py."""

from dataclasses import dataclass

from django.db.models import Count

from nightjar_delivery import queue_status, transport
from tickets import conf, contract
from tickets.models import ParkedDelivery, Registration, RejectedMessage, Seat, Ticket
from tickets.services import seats
from tickets.services.registrations import has_key, has_ticket, is_parked, parked_without_ticket, pending_registrations


@dataclass
class RegistrationState:
    code: str
    name: str
    state: str
    tickets: int
    completed: bool


def describe_state(*, tickets: int, completed: bool, parked: bool = False, seat: str = Seat.CONFIRMED) -> str:
    if seat != Seat.CONFIRMED:
        return seat  # "waiting" or "cancelled": whatever tickets and keys it has, it holds no seat
    if tickets == 0:
        return "parked" if parked else "key without ticket" if completed else "pending"
    if tickets > 1:
        return "duplicate tickets"
    return "ticket issued" if completed else "ticket without its key"


def registration_states(limit: int | None = None) -> list[RegistrationState]:
    rows = (
        Registration.objects.annotate(
            ticket_count=Count("tickets"),
            completed=has_key(),
            parked=is_parked(),
        )
        .order_by("id")
        .values_list("id", "name", "ticket_count", "completed", "parked", "seat")
    )
    if limit is not None:
        rows = rows[:limit]
    return [
        RegistrationState(
            code=contract.format_code(pk),
            name=name,
            state=describe_state(tickets=count, completed=completed, parked=parked, seat=seat),
            tickets=count,
            completed=completed,
        )
        for pk, name, count, completed, parked, seat in rows
    ]


@dataclass
class DeliveryStatus:
    registrations: int
    pending: int
    issued: int  # exactly one ticket and its key: the state "ticket issued"
    duplicates: int
    tickets: int
    rejected: int
    parked: int
    waiting_for_staff: int
    queue: dict | None
    queue_error: str = ""
    broker: str = ""
    without_key: int = 0  # one ticket, no key
    key_only: int = 0  # a key, no ticket, not parked
    waiting: int = 0  # no seat yet: on the waiting list
    cancelled: int = 0  # gave the seat back (a ticket it has is void)
    capacity: int | None = None  # None: room for everyone


def delivery_status() -> DeliveryStatus:
    """Totals from the database, one per state (they add up to the
    registrations), and the queue depth from the broker (or why not)."""
    seated = Registration.objects.filter(seat=Seat.CONFIRMED)  # the ticket states are those of a seat
    per_registration = seated.annotate(ticket_count=Count("tickets"))
    one_ticket = per_registration.filter(ticket_count=1)
    queue, queue_error = queue_status(conf.NIGHTJAR_QUEUE)
    counts = seats.seat_counts()
    return DeliveryStatus(
        registrations=Registration.objects.count(),
        pending=pending_registrations().count(),
        issued=one_ticket.filter(has_key()).count(),
        without_key=one_ticket.filter(~has_key()).count(),
        key_only=seated.filter(has_key(), ~has_ticket(), ~is_parked()).count(),
        duplicates=per_registration.filter(ticket_count__gt=1).count(),
        waiting=counts.waiting,
        cancelled=counts.cancelled,
        capacity=counts.capacity,
        tickets=Ticket.objects.count(),
        rejected=RejectedMessage.objects.count(),
        parked=parked_without_ticket().filter(seat=Seat.CONFIRMED).count(),
        waiting_for_staff=ParkedDelivery.objects.filter(resolution="").count(),
        queue=queue,
        queue_error=queue_error,
        broker=transport.name(),
    )


def desk_gauges() -> dict:
    """What a metrics scrape reads at that moment: pending and parked
    registrations from the database, queue depth from the broker (None when
    it does not answer within its deadline)."""
    queue, _ = queue_status(conf.NIGHTJAR_QUEUE)
    return {
        "pending": pending_registrations().count(),
        "parked": parked_without_ticket().count(),
        "queue": queue,
    }
