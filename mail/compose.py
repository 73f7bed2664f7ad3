"""A mail as the guest reads it: English, plain text and HTML from templates
(mail/templates/mail/<kind>.txt and .html), the guest's own secret link, the
ticket's PDF attached to the ticket mail, and the Message-ID made when the
row was stored (the same on every attempt)."""

from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse

from mail import conf
from mail.models import Kind, Mail
from tickets import pdf

SUBJECTS = {
    Kind.TICKET: "Your ticket for the evening ({code})",
    Kind.WAITING: "You are on the waiting list (place {place})",
    Kind.SEAT: "A seat is yours ({code})",
    Kind.CANCELLED: "Your registration {code} is cancelled",
}


class NothingToAttach(Exception):
    """The ticket mail's ticket is gone (repair removed it): str() says so."""


def guest_link(name: str, registration) -> str:
    return conf.NIGHTJAR_SITE_URL.rstrip("/") + reverse(name, args=[registration.code, registration.secret])


def compose(mail: Mail) -> EmailMultiAlternatives:
    registration = mail.registration
    context = {
        "mail": mail,
        "registration": registration,
        "place": mail.place,
        "link": guest_link("registration", registration),
        "ticket_link": guest_link("ticket", registration),
    }
    message = EmailMultiAlternatives(
        subject=SUBJECTS[mail.kind].format(code=registration.code, place=mail.place or "?"),
        body=render_to_string(f"mail/{mail.kind}.txt", context),
        from_email=conf.NIGHTJAR_MAIL_FROM,
        to=[mail.address],
        headers={"Message-ID": mail.message_id},
    )
    message.attach_alternative(render_to_string(f"mail/{mail.kind}.html", context), "text/html")
    if mail.kind == Kind.TICKET:
        ticket = registration.tickets_in_order().first()
        if ticket is None:
            raise NothingToAttach(f"{registration.code} has no ticket to attach (removed after it was issued).")
        message.attach(
            f"nightjar-ticket-{registration.code}-{ticket.number}.pdf", pdf.render(ticket), "application/pdf"
        )
    return message
