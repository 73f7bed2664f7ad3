"""Registrations: the guest's durable intent, recorded and published after
commit; finding one by its code; retrying one; and the queries that say which
state a registration is in (pending, parked, with a ticket, with its key),
which every other service builds on."""

import logging

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from nightjar_delivery import DomainError, get_channel, publish_on_commit, transport
from tickets import conf, contract, metrics, signals
from tickets.models import Completion, ParkedDelivery, Registration, Seat, Ticket
from tickets.services import evening
from tickets.services.staff import record_staff_action

logger = logging.getLogger(__name__)

CHANNEL = "registrations"  # tickets/channel.py's name (that module imports this one)


class NightjarError(DomainError):
    """A request that cannot be done; str() is the sentence to show a person."""


class UnknownRegistration(NightjarError):
    pass


class SubmissionConflict(NightjarError):
    pass


def find_registration(*, code: str) -> Registration:
    try:
        registration_id = contract.parse_code(code)
    except contract.ContractError as error:
        raise UnknownRegistration(str(error)) from None
    try:
        return Registration.objects.get(pk=registration_id)
    except Registration.DoesNotExist:
        raise UnknownRegistration(f"There is no registration {contract.format_code(registration_id)}.") from None


def publish_registration(registration: Registration, *, queue: str | None = None) -> None:
    """Publish one delivery of a registration (on NIGHTJAR_QUEUE, the
    registrations channel's queue, unless told). Raises transport.BrokerError.
    On a broker never call it inside a transaction: it waits on the network
    (the engine's publish_on_commit calls it after the commit there, and
    inside the registration's transaction on the database transport)."""
    body = contract.encode(registration_id=registration.pk, name=registration.name)
    # message_id tells publications apart in logs; dedup is by the body's ID.
    message_id = f"{registration.code}/{timezone.now().timestamp():.6f}"
    transport.publish(body, message_id=message_id, queue=queue or conf.NIGHTJAR_QUEUE)


def refuse_ticket_without_key(registration: Registration, what: str) -> None:
    """Guard of every path that publishes an existing registration: one with a
    ticket but no completion key (an unsafe handler's) is not pending; a safe
    handler would find the key new and issue a second ticket."""
    if Registration.objects.filter(has_ticket(), ~has_key(), pk=registration.pk).exists():
        raise NightjarError(
            f"{registration.code} has a ticket without its key; it is not {what}, because a new delivery would "
            f"make a second ticket. `python manage.py repair {registration.code} --apply` adds the key."
        )


def refuse_without_seat(registration: Registration, what: str) -> None:
    """Guard of every path that publishes an existing registration: a waiting
    or cancelled one holds no seat, and its delivery would make no ticket."""
    if registration.seat != Seat.CONFIRMED:
        raise NightjarError(f"{registration.code} is {registration.seat}: it holds no seat, so it is not {what}.")


def register_guest(*, name: str, submission_key: str | None = None, email: str = "") -> Registration:
    """Record a guest's registration (the durable intent) and publish it after commit.
    email: optional, already validated (the form's EmailField); mails go there.

    The same submission key with the same name returns the registration made
    the first time (a re-sent form); with another name it is refused.
    """
    name = contract.clean_name(name)
    try:
        for attempt in (1, 2):
            try:
                registration = _register(name, submission_key, email)
                break
            except evening.CapacityChanged:
                if attempt == 2:
                    raise
    except IntegrityError:
        # The key is unique: this form was sent before (a double click, a
        # browser retry, or two copies racing). Return what the first made.
        existing = Registration.objects.filter(submission_key=submission_key).first() if submission_key else None
        if existing is None:
            raise
        return _same_submission(existing, name)
    metrics.REGISTRATIONS.inc()
    return registration


def _register(name: str, submission_key: str | None, email: str) -> Registration:
    """One transaction: the seat decision (under the evening's lock) and the
    insert. Only a registration with a seat is published; a waiting one is
    published when a freed seat promotes it (and told it waits, in this transaction)."""
    with transaction.atomic():
        seat = evening.seat_for_newcomer()
        registration = Registration(name=name, submission_key=submission_key or None, seat=seat, email=email)
        Registration.objects.insert(registration)
        if seat == Seat.CONFIRMED:
            # Published with this commit (after it on a broker; the database transport's message
            # commits with it): a failed publish is logged and left for reconcile, the guest never
            # sees an error for it.
            publish_on_commit(get_channel(CHANNEL), registration)
        else:
            signals.registration_waiting.send(sender=Registration, registration=registration)
    return registration


def _same_submission(existing: Registration, name: str) -> Registration:
    if existing.name != name:
        raise SubmissionConflict(
            f"This form was already used to register {existing.name} ({existing.code}). "
            "Open the form again to register another guest."
        )
    return existing


def retry_registration(*, code: str, actor: str) -> Registration:
    """Publish a new delivery of an existing registration. Safe at any time:
    the worker makes no second ticket for a registration that has one."""
    registration = find_registration(code=code)
    refuse_without_seat(registration, "retried")
    refuse_ticket_without_key(registration, "retried")
    publish_registration(registration)
    record_staff_action(actor=actor, action="retry", registration=registration, detail="Published a new delivery.")
    return registration


def is_parked():
    """True for a registration held for staff (see ParkedDelivery)."""
    return Exists(ParkedDelivery.objects.holding().filter(registration=OuterRef("pk")))


def has_ticket():
    """True for a registration with at least one ticket."""
    return Exists(Ticket.objects.filter(registration=OuterRef("pk")))


def has_key():
    """True for a registration whose completion key is written."""
    return Exists(Completion.objects.filter(registration=OuterRef("pk")))


def parked_without_ticket():
    """The registrations in the state "parked" (a ticket, if one was made after all, wins)."""
    return Registration.objects.filter(is_parked(), ~has_ticket())


def pending_registrations():
    """Registrations that have a seat, no ticket and no completion key yet and
    are not parked, oldest first (waiting and cancelled ones are never
    published). A ticket without its key is not pending: publishing
    it again would make a second ticket (repair adds the key)."""
    return Registration.objects.filter(~has_ticket(), ~has_key(), ~is_parked(), seat=Seat.CONFIRMED).order_by(
        "created", "id"
    )
