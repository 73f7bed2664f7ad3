"""The audit: the promise (one ticket per registration, keys and tickets in
pairs) checked row by row."""

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, Exists, OuterRef
from django.utils import timezone

from nightjar_delivery import conf, transport
from tickets import contract
from tickets.models import Registration, Ticket
from tickets.services.registrations import has_key, parked_without_ticket, pending_registrations


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    checked: int = 0
    # Not violations: what waits for a person (the promise is kept, not yet fulfilled).
    parked: int = 0
    dead_lettered: int | None = None
    dead_lettered_error: str = ""

    @property
    def passed(self) -> bool:
        return not self.violations


def audit_invariants(*, pending_older_than: float = 300, limit: int = 50) -> AuditReport:
    """Check the promise row by row: one ticket per completed registration,
    keys and tickets in pairs, names that match, nothing pending for long.
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
    add(f"pending for more than {pending_older_than:g} s", pending_registrations().filter(created__lt=cutoff))
    return report
