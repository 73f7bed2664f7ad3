"""One registration's history for the desk: everything that happened to it,
oldest first, bounded per kind."""

from dataclasses import dataclass
from datetime import datetime

from tickets.models import Completion, Registration


@dataclass
class HistoryEvent:
    at: datetime
    what: str
    detail: str = ""


# Each kind of event shows at most its newest HISTORY_PER_KIND rows: a registration
# redelivered or failed thousands of times must not make its page cost seconds.
HISTORY_PER_KIND = 100


def registration_history(registration: Registration) -> tuple[list[HistoryEvent], str]:
    """Everything that happened to a registration, oldest first (the newest
    HISTORY_PER_KIND of each kind, and a line saying how many were left out),
    and a one-line count of its deliveries, counted in the database."""
    events = [HistoryEvent(registration.created, "registered", registration.name)]
    left_out = 0

    def newest(related):
        nonlocal left_out
        rows = list(related.all()[: HISTORY_PER_KIND + 1])  # the models order newest first
        if len(rows) > HISTORY_PER_KIND:
            rows = rows[:HISTORY_PER_KIND]
            left_out += related.count() - HISTORY_PER_KIND
        return rows

    for action in newest(registration.staff_actions):
        events.append(HistoryEvent(action.at, action.action, f"{action.detail} ({action.actor})"))
    for failure in newest(registration.delivery_failures):
        events.append(HistoryEvent(failure.at, "attempt failed", f"{failure.error} (worker {failure.worker})"))
    for redelivery in newest(registration.redeliveries):
        events.append(
            HistoryEvent(
                redelivery.at, "delivered again", f"delivery {redelivery.delivery}, to worker {redelivery.worker}"
            )
        )
    for parked in newest(registration.parked_deliveries):
        events.append(HistoryEvent(parked.parked, "parked", f"after {parked.attempts} returns: {parked.reason}"))
    for rejected in newest(registration.rejected_messages):
        events.append(HistoryEvent(rejected.received, "delivery rejected", rejected.reason))
    completion = Completion.objects.filter(registration=registration).first()
    if completion is not None:
        events.append(HistoryEvent(completion.completed, "completion key written"))
    for ticket in registration.tickets_in_order()[:HISTORY_PER_KIND]:
        waited = (ticket.issued - registration.created).total_seconds()
        events.append(
            HistoryEvent(ticket.issued, "ticket issued", f"{ticket.number}, {waited:.1f} s after registering")
        )
    events.sort(key=lambda event: event.at)
    if left_out:
        events.insert(
            1,
            HistoryEvent(
                events[1].at if len(events) > 1 else registration.created,
                "not shown",
                f"{left_out} older event(s); the newest {HISTORY_PER_KIND} of each kind are shown",
            ),
        )
    republished = registration.staff_actions.filter(action__in=("republish", "retry", "requeue")).count()
    failed = registration.delivery_failures.count()
    summary = (
        f"Published {1 + republished} time(s) ({republished} republished by reconcile, retry or requeue); "
        f"{registration.redeliveries.count()} redelivery(ies) recorded, {failed} failed attempt(s)."
    )
    return events, summary
