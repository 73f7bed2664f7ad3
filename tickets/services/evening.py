"""The evening's row and the seat decision of a newcomer: the one lock every
seat decision takes (services/seats.py builds cancelling and the capacity on
it; registrations.register_guest asks seat_for_newcomer)."""

from nightjar_delivery import sql
from tickets.models import Evening, Registration, Seat


class CapacityChanged(Exception):
    """The capacity was set while a registration read "room for everyone"
    without the exclusive lock: the registration starts again (once)."""


def locked_capacity(*, exclusive: bool = True) -> int | None:
    """The evening's capacity, its row locked until the transaction ends:
    exclusively for a decision that counts seats, shared for one that only
    needs the capacity to stay unset (registrations with room for everyone
    do not queue behind each other). Call inside transaction.atomic()."""
    table = Evening._meta.db_table
    lock = (" FOR UPDATE" if exclusive else " FOR SHARE") if sql.vendor() == "postgresql" else ""
    rows = sql.execute(f"SELECT capacity FROM {table} WHERE id = 1{lock}", [])
    if not rows:
        # A database flushed by a test, or made before the migration's row: make it, then lock it.
        Evening.objects.get_or_create(pk=1)
        rows = sql.execute(f"SELECT capacity FROM {table} WHERE id = 1{lock}", [])
    return rows[0][0]


def capacity() -> int | None:
    """The capacity as it stands (no lock): None is room for everyone. A
    plain statement: every guest's POST asks (the ORM's query cost more than
    the read, issue 43)."""
    rows = sql.execute(f"SELECT capacity FROM {Evening._meta.db_table} WHERE id = 1", [])
    return rows[0][0] if rows else None


def seats_taken() -> int:
    return Registration.objects.filter(seat=Seat.CONFIRMED).count()


def seat_for_newcomer() -> str:
    """Inside register_guest's transaction, before the insert: CONFIRMED if a
    seat is left (and nobody waits ahead), else WAITING. Raises
    CapacityChanged when the capacity was set between the unlocked read and
    the shared lock (the caller starts the transaction again)."""
    if capacity() is None:
        if locked_capacity(exclusive=False) is None:
            return Seat.CONFIRMED
        raise CapacityChanged
    limit = locked_capacity(exclusive=True)
    if limit is None:
        return Seat.CONFIRMED
    if seats_taken() < limit and not Registration.objects.filter(seat=Seat.WAITING).exists():
        return Seat.CONFIRMED
    return Seat.WAITING
