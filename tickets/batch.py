"""Batch mode (`worker --batch N`): the handler's promise for many deliveries
at once. Same rules as tickets/handler.py — keys and tickets in ONE
transaction, ack only after the commit — but one commit and one
`multiple=True` ack for the whole batch, which is what makes it fast.

Rejected deliveries of the batch are recorded in the same transaction, so one
commit covers everything the single ack then confirms. Any error rolls the
whole batch back and nothing is acked.
"""

from django.db import transaction

from tickets import services
from tickets.checkpoints import checkpoint
from tickets.models import Completion, Registration, Ticket


def handle_batch(messages, rejections, ack_all, pause=None):
    """messages: checked Messages; rejections: (delivery, reason) pairs;
    ack_all(): ack every delivery of the batch at once."""
    checkpoint(pause, "before-write")

    with transaction.atomic():
        for delivery, reason in rejections:
            services.record_rejection(delivery=delivery, reason=reason)
        ids = sorted({message.registration_id for message in messages})
        # Lock the registrations (PostgreSQL; SQLite's IMMEDIATE transaction
        # already serialises writers) so two batches cannot both see "new".
        list(Registration.objects.select_for_update().filter(pk__in=ids).values_list("pk", flat=True))
        done = set(Completion.objects.filter(registration_id__in=ids).values_list("registration_id", flat=True))
        new = {}
        for message in messages:  # a batch may hold the same registration twice
            if message.registration_id not in done:
                new.setdefault(message.registration_id, message)
        Completion.objects.bulk_create([Completion(registration_id=pk) for pk in new])
        checkpoint(pause, "inside-transaction")
        Ticket.objects.bulk_create([Ticket(registration_id=pk, name=m.name) for pk, m in new.items()])

    checkpoint(pause, "after-commit")
    ack_all()
