"""Your handler for the Nightjar lab, step 2: the ack after the commit.

`python manage.py lab start --step 2` writes this file to lab/handler.py.
Ctrl+C before the commit now gives the delivery back: nothing is lost. Not
safe yet: Ctrl+C after the commit, before the ack, and the redelivery makes a
second ticket (step 3 fixes that).
"""

from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Ticket


def handle(message, ack, pause=None):
    """message: .registration_id and .name (checked against the registration);
    ack(): tell the broker the delivery is done; pause: the checkpoints."""
    checkpoint(pause, "before-write")

    with transaction.atomic():
        Ticket.objects.create(registration_id=message.registration_id, name=message.name)
        checkpoint(pause, "inside-transaction")

    checkpoint(pause, "after-commit")
    ack()  # Committed: only now may the broker forget the delivery.
