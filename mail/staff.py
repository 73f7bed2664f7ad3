"""Staff's one change to the outbox: send a guest's mail again (a failed one,
or a sent one the guest says never came). A new mail of the same kind to the
registration's address, with its own Message-ID (a person decided it: it is
not an attempt of the old one, which stays as it was), and a line in the
staff trail, in one transaction."""

from django.db import transaction

from mail.models import Kind, Mail, State
from mail.outbox import store_mails
from tickets.models import Registration, Seat
from tickets.services.registrations import NightjarError
from tickets.services.staff import record_staff_action


class ResendRefused(NightjarError):
    pass


def plan_resend(mail: Mail) -> str:
    """The line staff read before they confirm; raises ResendRefused."""
    registration = mail.registration
    if mail.state in (State.WAITING, State.RETRYING):
        raise ResendRefused(f"{registration.code}'s {mail.get_kind_display()} mail is still being sent ({mail.state}).")
    if not registration.email:
        raise ResendRefused(f"{registration.code} has no e-mail address any more.")
    if mail.kind == Kind.TICKET and registration.seat == Seat.CANCELLED:
        raise ResendRefused(f"{registration.code} is cancelled: its ticket is void, so its ticket mail is not resent.")
    was = f"failed: {mail.last_reply}" if mail.state == State.FAILED else f"sent {mail.sent:%Y-%m-%d %H:%M} UTC"
    return f"{registration.code}: {mail.get_kind_display()} again to {registration.email} (the last one {was})"


def resend_mail(*, mail_id: int, actor: str) -> Mail:
    """Store the mail again (the sender sends it); the trail says who and why. Raises ResendRefused."""
    with transaction.atomic():
        old = Mail.objects.select_for_update().select_related("registration").get(pk=mail_id)
        old.registration = Registration.objects.select_for_update().get(pk=old.registration_id)
        line = plan_resend(old)
        [new] = store_mails(old.kind, [(old.registration_id, old.registration.email)], place=old.place)
        record_staff_action(actor=actor, action="resend mail", registration=old.registration, detail=line)
    return new
