"""Your handler for the Nightjar lab (made by `python manage.py lab start`).

It turns one delivery into one ticket, and it is NOT safe yet: it acks first.
The worker calls handle() for each delivery; the three checkpoint() calls are
where `worker --pause NAME` stops. Edit this file only, step by step, as
docs/lab.md says, and run `python manage.py lab check` to have it graded.
"""

from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Ticket


def handle(message, ack, pause=None):
    """message: .registration_id and .name (checked against the registration);
    ack(): tell RabbitMQ the delivery is done; pause: the checkpoints."""
    ack()  # RabbitMQ forgets the delivery here, before any work is done.

    checkpoint(pause, "before-write")

    with transaction.atomic():
        Ticket.objects.create(registration_id=message.registration_id, name=message.name)
        checkpoint(pause, "inside-transaction")

    checkpoint(pause, "after-commit")
