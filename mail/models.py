"""The mail outbox: one row per mail a guest is owed, written in the same
transaction as the fact it tells of (mail/outbox.py), sent later by the
sender (mail/sender.py) outside any transaction."""

import secrets
from email.utils import parseaddr

from django.db import models
from django.utils import timezone

from mail import conf
from tickets.models import Registration


def new_message_id() -> str:
    """The mail's identity, made once when its row is stored: every attempt
    sends it, so a receiver that deduplicates by Message-ID keeps one copy."""
    domain = parseaddr(conf.NIGHTJAR_MAIL_FROM)[1].rpartition("@")[2] or "nightjar.invalid"
    return f"<{secrets.token_hex(16)}@{domain}>"


class Kind(models.TextChoices):
    TICKET = "ticket", "your ticket"
    WAITING = "waiting", "your place on the waiting list"
    SEAT = "seat", "a seat is yours"
    CANCELLED = "cancelled", "your registration is cancelled"


class State(models.TextChoices):
    """One meaning each (DESIGN.md, "Effects outside the database")."""

    WAITING = "waiting", "waiting"  # stored, not tried yet (or claimed by a sender right now)
    SENT = "sent", "sent"  # the mail server accepted it
    RETRYING = "retrying", "retrying"  # refused for now (4xx, no answer): tried again after next_attempt
    FAILED = "failed", "failed"  # refused for good (5xx) or out of attempts; staff may resend


class Mail(models.Model):
    """A mail to a guest: what it tells (kind), to whom, and how its sending goes."""

    # A registration deleted (only the lab's reset does) takes its mails with it.
    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="mails")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    address = models.EmailField(max_length=254)
    message_id = models.CharField("Message-ID", max_length=200, unique=True, default=new_message_id, editable=False)
    # The waiting mail's place on the list when it was stored.
    place = models.PositiveIntegerField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.WAITING)
    attempts = models.PositiveIntegerField(default=0)
    # Due when waiting or retrying and this has passed; a sender's claim moves it a lease ahead.
    next_attempt = models.DateTimeField(default=timezone.now)
    last_reply = models.CharField("the mail server's last sentence", max_length=1000, blank=True)
    created = models.DateTimeField(default=timezone.now)
    sent = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The sender's claim: due mails, soonest first (mail/sender.py claim_due).
            models.Index(fields=["state", "next_attempt"], name="mail_due"),
        ]
        permissions = [("resend_mail", "Can send a guest's mail again")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.registration.code} ({self.state})"

    @property
    def for_guest(self) -> str:
        """Where the mail stands, as the guest's page says it."""
        if self.state == State.SENT:
            return "sent"
        if self.state == State.FAILED:
            return f"could not be delivered: the mail server said “{self.last_reply}”"
        if self.state == State.RETRYING:
            return "not sent yet: the mail server asked us to try again later"
        return "about to be sent"
