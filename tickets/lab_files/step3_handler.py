"""Your handler for the Nightjar lab, step 3: the repeat made safe.

`python manage.py lab start --step 3` writes this file to lab/handler.py.
The completion key and the ticket go in ONE transaction, and the ticket is
made only when the key is new: a redelivery finds the key and makes nothing.
Then, after the commit, the ack. `python manage.py lab check` passes with it.
"""

from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Completion, Ticket


def handle(message, ack, pause=None):
    """message: .registration_id and .name (checked against the registration);
    ack(): tell the broker the delivery is done; pause: the checkpoints."""
    checkpoint(pause, "before-write")

    with transaction.atomic():
        # The key's primary key is the registration: a repeat finds it there.
        is_new = Completion.objects.insert_if_new(registration_id=message.registration_id)
        checkpoint(pause, "inside-transaction")
        if is_new:
            Ticket.objects.create(registration_id=message.registration_id, name=message.name)

    checkpoint(pause, "after-commit")
    ack()  # Committed: only now may the broker forget the delivery.
