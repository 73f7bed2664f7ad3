"""The handler: turns one delivery into exactly one ticket. Learners edit this.

RabbitMQ delivers at least once, so the same registration can arrive again
(after a crash, a retry or a republish). This handler makes a repeat harmless:

1. In ONE database transaction, insert the Completion key for the
   registration and, only if that key is new, the Ticket.
2. Only after the commit, ack the delivery.

Crash before the commit: nothing was written, no ack, RabbitMQ redelivers.
Crash after the commit but before the ack: RabbitMQ redelivers, the key is
already there, no second ticket is made, and this time the ack gets through.
This is safe repeated effects in the database, not exactly-once delivery.
"""

from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Completion
from tickets.services.tickets import issue_ticket


def handle(message, ack, pause=None):
    """message: .registration_id and .name, already checked against the
    registration; ack(): tell RabbitMQ the delivery is done; pause: checkpoints."""
    checkpoint(pause, "before-write")

    with transaction.atomic():
        # The key's primary key IS the registration: a repeat finds it there.
        is_new = Completion.objects.insert_if_new(registration_id=message.registration_id)
        checkpoint(pause, "inside-transaction")
        if is_new:
            issue_ticket(registration_id=message.registration_id, name=message.name)

    # Committed. Only now may RabbitMQ forget the delivery.
    checkpoint(pause, "after-commit")
    ack()
