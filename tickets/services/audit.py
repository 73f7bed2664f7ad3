"""The audit: the promise (one ticket per registration, keys and tickets in
pairs) checked row by row."""

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, Exists, Max, OuterRef
from django.db.models.functions import Coalesce
from django.utils import timezone

from nightjar_delivery import transport
from tickets import conf, contract
from tickets.models import Registration, Seat, Ticket
from tickets.services import seats
from tickets.services.registrations import has_key, parked_without_ticket, pending_registrations


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    checked: int = 0
    # Not violations: what waits for a person (the promise is kept, not yet fulfilled).
    parked: int = 0
    dead_lettered: int | None = None
    dead_lettered_error: str = ""
    # Not a violation: tickets made before their registration was cancelled (void: no download, red at the door).
    void_tickets: int = 0

    @property
    def passed(self) -> bool:
        return not self.violations


def audit_invariants(*, pending_older_than: float = 300, limit: int = 50) -> AuditReport:
    """Check the promise row by row: one ticket per completed registration,
    keys and tickets in pairs, names that match, nothing pending for long
    (counted from its seat: a promoted guest's clock starts at the promotion);
    and the seats: no more confirmed than the capacity, nobody waiting ahead
    of a guest confirmed after them.
    Each kind of violation lists at most `limit` IDs, then a count."""
    report = AuditReport(
        checked=Registration.objects.count(),
        parked=parked_without_ticket().count(),
    )
    try:
        report.dead_lettered = transport.queue_counts(conf.NIGHTJAR_QUEUE)["dead"]
    except transport.BrokerError as error:
        report.dead_lettered_error = str(error)
    per_registration = Registration.objects.annotate(ticket_count=Count("tickets"))

    def add(kind: str, rows) -> None:
        codes = [contract.format_code(pk) for pk in rows.values_list("pk", flat=True)[: limit + 1]]
        if codes:
            more = f" and {rows.count() - limit} more" if len(codes) > limit else ""
            report.violations.append(f"{kind}: {', '.join(codes[:limit])}{more}")

    add("more than one ticket", per_registration.filter(ticket_count__gt=1).order_by("pk"))
    add("completion key without a ticket", per_registration.filter(has_key(), ticket_count=0).order_by("pk"))
    add("ticket without its key", per_registration.filter(~has_key(), ticket_count__gt=0).order_by("pk"))
    mismatched = Registration.objects.filter(
        Exists(Ticket.objects.filter(registration=OuterRef("pk")).exclude(name=OuterRef("name")))
    )
    add("ticket name differs from the registration", mismatched.order_by("pk"))
    cutoff = timezone.now() - timedelta(seconds=pending_older_than)
    seated_since = pending_registrations().annotate(since=Coalesce("promoted", "created"))
    add(f"pending for more than {pending_older_than:g} s", seated_since.filter(since__lt=cutoff))
    counts = seats.seat_counts()
    if counts.capacity is not None and counts.confirmed > counts.capacity:
        report.violations.append(f"more seats confirmed than the capacity: {counts.confirmed} of {counts.capacity}")
    last_confirmed = Registration.objects.filter(seat=Seat.CONFIRMED).aggregate(last=Max("pk"))["last"]
    if last_confirmed is not None:
        skipped = Registration.objects.filter(seat=Seat.WAITING, pk__lt=last_confirmed).order_by("pk")
        add("waiting ahead of a guest confirmed after them", skipped)
    report.void_tickets = Registration.objects.filter(seat=Seat.CANCELLED, tickets__isnull=False).distinct().count()
    return report
