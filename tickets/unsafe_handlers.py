"""Two UNSAFE handlers a learner starts from. Never run them in production.

Run one with `python manage.py worker --handler tickets.unsafe_handlers.ack_first`
and interrupt it at a checkpoint to see what goes wrong; `verify_handler`
fails both. Compare them with the safe one in tickets/handler.py.
"""

from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Completion, Ticket


def ack_first(message, ack, pause=None):
    """Acks BEFORE the work. Interrupted before the commit, the ticket is lost:
    RabbitMQ has already forgotten the delivery, so nothing redelivers it."""
    ack()
    checkpoint(pause, "before-write")
    with transaction.atomic():
        is_new = Completion.objects.insert_if_new(registration_id=message.registration_id)
        checkpoint(pause, "inside-transaction")
        if is_new:
            Ticket.objects.create(registration_id=message.registration_id, name=message.name)
    checkpoint(pause, "after-commit")


def no_completion_key(message, ack, pause=None):
    """Acks after the commit but writes no completion key. Interrupted after
    the commit and before the ack, the redelivery makes a SECOND ticket."""
    checkpoint(pause, "before-write")
    with transaction.atomic():
        Ticket.objects.create(registration_id=message.registration_id, name=message.name)
        checkpoint(pause, "inside-transaction")
    checkpoint(pause, "after-commit")
    ack()
