"""What the ticket domain tells other apps about a guest's facts. Each signal
is sent INSIDE the transaction that makes the fact, so whatever a receiver
writes (a mail to the guest: mail/outbox.py) commits or rolls back with it;
a receiver that raises rolls the fact back too. Sent with send(), never
send_robust(): no fact without what its receivers store."""

from django.dispatch import Signal

# registration_ids: list[int] — tickets were issued for these registrations
# (tickets/services/tickets.py: the worker's handler and batch handler, repair), before the tickets' INSERT.
# Sent for every delivery: its receivers are cached per sender (as Django's model signals are),
# not looked up again on every send.
tickets_issued = Signal(use_caching=True)
# registration — stored while the evening was full: it waits for a seat.
registration_waiting = Signal()
# registrations: list — waiting guests given a freed seat (their tickets follow).
seats_given = Signal()
# registration — cancelled (by the guest or staff).
registration_cancelled = Signal()
