"""The outbox's side of each fact: a guest's mail stored in the SAME
transaction as the fact it tells of (tickets/signals.py is sent inside it):
the ticket issued, the place on the waiting list, the seat given, the
cancellation. A rolled-back fact leaves no mail; a committed one leaves a row
the sender finds however long it was down. Only registrations with an
address get mail."""

from dataclasses import dataclass

from django.db.models import Count
from django.dispatch import receiver
from django.utils import timezone

from mail.models import Kind, Mail, State
from nightjar_delivery import sql
from tickets import signals
from tickets.models import Registration
from tickets.services.seats import waiting_place


def store_mails(kind: str, registrations: list[tuple[int, str]], *, place: int | None = None) -> list[Mail]:
    """One mail of `kind` per (registration id, address), in the caller's transaction."""
    mails = [Mail(registration_id=pk, address=address, kind=kind, place=place) for pk, address in registrations]
    return Mail.objects.bulk_create(mails) if mails else []


def addresses(registration_ids: list[int]) -> list[tuple[int, str]]:
    """(id, address) of those registrations that have one: the worker asks
    this for every ticket or batch it issues. Its screening read those rows
    just before (Registration.objects.stored, at most a second before: the
    addresses as read with the names they check), so no statement then;
    otherwise one indexed statement on the engine's plain cursor (an ORM
    query compiles anew each time)."""
    ids = sorted(set(registration_ids))
    read = Registration.objects.read_addresses
    if all(pk in read for pk in ids):
        return [(pk, read[pk]) for pk in ids if read[pk]]
    table = Registration._meta.db_table
    if sql.vendor() == "postgresql":  # one array parameter whatever the batch's size
        return sql.execute(f"SELECT id, email FROM {table} WHERE id = ANY(%s) AND email <> '' ORDER BY id", [ids])
    marks = ", ".join(["%s"] * len(ids))
    return sql.execute(f"SELECT id, email FROM {table} WHERE id IN ({marks}) AND email <> '' ORDER BY id", ids)


@receiver(signals.tickets_issued)
def ticket_issued(sender, registration_ids: list[int], **kwargs) -> None:
    store_mails(Kind.TICKET, addresses(registration_ids))


@receiver(signals.registration_waiting)
def waiting(sender, registration: Registration, **kwargs) -> None:
    if registration.email:
        store_mails(Kind.WAITING, [(registration.pk, registration.email)], place=waiting_place(registration))


@receiver(signals.seats_given)
def seats_given(sender, registrations: list[Registration], **kwargs) -> None:
    store_mails(Kind.SEAT, [(r.pk, r.email) for r in registrations if r.email])


@receiver(signals.registration_cancelled)
def cancelled(sender, registration: Registration, **kwargs) -> None:
    if registration.email:
        store_mails(Kind.CANCELLED, [(registration.pk, registration.email)])


@dataclass
class OutboxCounts:
    """The outbox at one moment: {state: {kind: count}} and the totals per state."""

    by_state: dict[str, dict[str, int]]

    def total(self, state: str) -> int:
        return sum(self.by_state[state].values())


def outbox_counts() -> OutboxCounts:
    """Mails per state and kind (the desk): one GROUP BY."""
    by_state = {state: dict.fromkeys(Kind.values, 0) for state in State.values}
    for state, kind, count in Mail.objects.order_by().values_list("state", "kind").annotate(n=Count("pk")):
        by_state[state][kind] = count
    return OutboxCounts(by_state=by_state)


@dataclass
class MailActivity:
    start: object  # the first bucket's start (a datetime)
    stored: list[int]
    sent: list[int]


def mail_activity(*, window, bucket_seconds: int) -> MailActivity:
    """Mails stored and sent per bucket over the window (the desk's chart)."""
    start = timezone.now() - window
    count = int(window.total_seconds() // bucket_seconds)
    stored, sent = [0] * count, [0] * count
    for field, values in (("created", stored), ("sent", sent)):
        for moment in Mail.objects.filter(**{f"{field}__gte": start}).values_list(field, flat=True):
            values[min(count - 1, int((moment - start).total_seconds() // bucket_seconds))] += 1
    return MailActivity(start=start, stored=stored, sent=sent)
