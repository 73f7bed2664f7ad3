"""Batch mode (`worker --batch N`): the handler's promise for many deliveries
at once. Same rules as tickets/handler.py — keys and tickets in ONE
transaction, ack only after the commit — but one commit and one
`multiple=True` ack for the whole batch, which is what makes it fast.

Rejected deliveries of the batch are recorded in the same transaction, so one
commit covers everything the single ack then confirms. Any error rolls the
whole batch back and nothing is acked.
"""

from django.db import transaction

from nightjar_delivery import record_rejection
from tickets.checkpoints import checkpoint
from tickets.models import Completion
from tickets.services.tickets import issue_tickets


def handle_batch(messages, rejections, ack_all, pause=None, *, channel):
    """messages: checked Messages; rejections: (delivery, reason) pairs,
    recorded in that channel's tables; ack_all(): ack every delivery of the
    batch at once. Returns the IDs of the registrations that got their ticket now."""
    checkpoint(pause, "before-write")

    with transaction.atomic():
        for delivery, reason in rejections:
            record_rejection(delivery=delivery, reason=reason, channel=channel)
        # INSERT ... ON CONFLICT DO NOTHING RETURNING: only the keys that were
        # new come back, on SQLite and PostgreSQL alike; a concurrent batch
        # holding the same key makes this wait, then skip it.
        new = Completion.objects.insert_new([message.registration_id for message in messages])
        checkpoint(pause, "inside-transaction")
        names = {message.registration_id: message.name for message in messages if message.registration_id in new}
        issue_tickets(sorted(names.items()), commit=True)  # the last statement: with the COMMIT

    checkpoint(pause, "after-commit")
    ack_all()
    return new
