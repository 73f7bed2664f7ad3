"""Issuing tickets: the one home of "a ticket is issued". The worker's
handler (tickets/handler.py) and batch handler (tickets/batch.py) and repair
(services/repair.py) issue through here, inside their own transaction: first
the domain's tickets_issued signal (its receivers, e.g. the ticket's mail,
write in that transaction), then the tickets themselves
(Ticket.objects.issue_many: one plain INSERT, or the ORM's save() for each
when a pre_save or post_save receiver listens for tickets, so it hears every
ticket the product issues). Something to do whenever a ticket is issued
belongs here or in a receiver of either signal."""

from tickets import signals
from tickets.models import Ticket


def issue_ticket(*, registration_id: int, name: str) -> None:
    """One ticket (the per-delivery handler's)."""
    issue_tickets([(registration_id, name)])


def issue_tickets(tickets: list[tuple[int, str]], *, commit: bool = False) -> None:
    """Tickets for (registration_id, name) pairs, in the caller's
    transaction. commit: the INSERT is the last statement of the outermost
    atomic block, sent with the COMMIT on PostgreSQL (the batch handler's
    round trip saved; ignored when it cannot be)."""
    if not tickets:
        return
    # Before the INSERT, which may go with the COMMIT: receivers write in this transaction.
    signals.tickets_issued.send(sender=Ticket, registration_ids=[pk for pk, _ in tickets])
    Ticket.objects.issue_many(tickets, commit=commit)
