"""The sender: delivers the outbox's mails at least once, every attempt with
the mail's own Message-ID.

The loop claims a due mail in one short transaction (moving its next
attempt a lease ahead and counting the attempt), sends it OUTSIDE any
transaction, then records what the mail server said in a short transaction
of its own:
- accepted (250): sent. Recorded only after the server's acceptance, so the
  one window for a second copy is a sender dying (or its database failing)
  between the two (README, "Mail to guests"); the copy carries the same Message-ID.
- a permanent refusal (5xx to the sender, the address or the message): failed
  at once, with the server's own sentence.
- anything temporary (4xx, refused connection, a timeout, a dropped line):
  retrying, after a backoff that doubles, until NIGHTJAR_MAIL_ATTEMPTS; then failed.
Every wait on the server has NIGHTJAR_SMTP_TIMEOUT, one mail's whole
conversation ATTEMPT_WAITS of them. A mail that waits for its
retry is behind every mail due before it, so one bad address or one slow
server holds back nobody else's mail. A mail claimed by a sender that died
comes back to every sender when its lease runs out: a committed mail is never
forgotten. Without NIGHTJAR_SMTP_HOST the mails are written as .eml files to
NIGHTJAR_MAIL_DIR instead (bin/run's default)."""

import email.generator
import email.message
import io
import logging
import os
import smtplib
import ssl
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from mail import conf, metrics
from mail.compose import NothingToAttach, compose
from mail.models import Mail, State

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 3600
# One attempt's whole conversation (connect to the answer to DATA) may take this many
# NIGHTJAR_SMTP_TIMEOUTs, however the server spreads its answers; QUIT one more.
ATTEMPT_WAITS = 3


def longest_attempt() -> float:
    """Seconds one attempt can take at most (a claim's lease must be longer: mail.W003)."""
    return (ATTEMPT_WAITS + 1) * conf.NIGHTJAR_SMTP_TIMEOUT


class Refused(Exception):
    """The mail was not accepted; str() is the server's sentence (or what went wrong)."""

    def __init__(self, sentence: str, *, permanent: bool) -> None:
        super().__init__(sentence)
        self.permanent = permanent


@dataclass
class Outcome:
    mail: Mail
    state: str
    reply: str


def claim_due(*, limit: int = 10) -> list[Mail]:
    """Take up to `limit` due mails, soonest first, for this sender: one short
    transaction moves each one's next attempt a lease ahead and counts the
    attempt (so a mail that kills its sender is bounded too). On PostgreSQL
    competing senders skip each other's rows; SQLite's immediate transactions
    let one claim at a time."""
    now = timezone.now()
    with transaction.atomic():
        due = Mail.objects.filter(state__in=[State.WAITING, State.RETRYING], next_attempt__lte=now)
        # Out of attempts yet due again: every sender that claimed it stopped before recording (a mail
        # that kills its sender, or a run of bad luck). Failed, so it cannot take every sender down forever.
        attempts = conf.NIGHTJAR_MAIL_ATTEMPTS
        due.filter(attempts__gte=attempts).update(
            state=State.FAILED,
            last_reply=f"Gave up after {attempts} attempts: the sender stopped during each, before it could record it.",
        )
        due = due.filter(attempts__lt=attempts)
        due = due.order_by("next_attempt", "id").select_related("registration")
        if connection.vendor == "postgresql":
            due = due.select_for_update(skip_locked=True, of=("self",))
        mails = list(due[:limit])
        if mails:
            lease = now + timedelta(seconds=conf.NIGHTJAR_MAIL_LEASE_SECONDS)
            Mail.objects.filter(pk__in=[mail.pk for mail in mails]).update(
                next_attempt=lease, attempts=F("attempts") + 1
            )
    for mail in mails:
        mail.attempts += 1
    return mails


def backoff(attempts: int) -> float:
    """Seconds before the next try after `attempts` tries: doubling, at most an hour."""
    return min(conf.NIGHTJAR_MAIL_RETRY_SECONDS * 2 ** max(0, attempts - 1), MAX_BACKOFF_SECONDS)


def wire_bytes(message: email.message.Message) -> bytes:
    """The message as SMTP carries it (CRLF line ends). Through the standard
    library's generator: Django 5.2's message takes a linesep, Django 6's
    (email.message.EmailMessage, the modern API) takes a policy instead."""
    out = io.BytesIO()
    email.generator.BytesGenerator(out, mangle_from_=False).flatten(message, linesep="\r\n")
    return out.getvalue()


def deliver(mail: Mail) -> Outcome:
    """Send one claimed mail (outside any transaction) and record the outcome."""
    try:
        message = compose(mail).message()
    except NothingToAttach as error:
        return record(mail, Refused(str(error), permanent=True))
    except Exception as error:  # a template or PDF that cannot be made: retried, bounded, logged
        logger.exception("Could not compose mail %s", mail.pk)
        return record(mail, Refused(f"Could not compose the mail: {type(error).__name__}: {error}", permanent=False))
    try:
        reply = transmit(mail, wire_bytes(message))
    except Refused as refusal:
        return record(mail, refusal)
    except Exception as error:  # a bug or an address smtplib cannot write: this mail's failure alone
        logger.exception("Could not send mail %s", mail.pk)
        return record(mail, Refused(f"Could not send the mail: {type(error).__name__}: {error}", permanent=False))
    return record(mail, None, reply=reply)


def record(mail: Mail, refusal: Refused | None, *, reply: str = "") -> Outcome:
    """The outcome in one statement; a mail another sender already recorded sent stays sent."""
    now = timezone.now()
    if refusal is None:
        state, changes = State.SENT, {"sent": now, "last_reply": reply[:1000]}
    elif refusal.permanent or mail.attempts >= conf.NIGHTJAR_MAIL_ATTEMPTS:
        state, reply = State.FAILED, str(refusal)
        if not refusal.permanent:
            reply = f"Gave up after {mail.attempts} attempts: {reply}"
        changes = {"last_reply": reply[:1000]}
    else:
        state, reply = State.RETRYING, str(refusal)
        changes = {"last_reply": reply[:1000], "next_attempt": now + timedelta(seconds=backoff(mail.attempts))}
    Mail.objects.filter(pk=mail.pk).exclude(state=State.SENT).update(state=state, **changes)
    metrics.count_attempt(mail.kind, state)
    return Outcome(mail=mail, state=state, reply=reply)


def transmit(mail: Mail, data: bytes) -> str:
    """Hand one mail to the server (or write it as a file); the server's
    acceptance sentence. Raises Refused."""
    if not conf.NIGHTJAR_SMTP_HOST:
        return write_file(mail, data)
    return smtp_send(conf.NIGHTJAR_MAIL_FROM, envelope_address(mail.address), data)


def envelope_address(address: str) -> str:
    """The address as SMTP's envelope carries it: an internationalised domain
    (Django's EmailField lets one through) in its ASCII form (IDNA), as
    Django's own mail does."""
    local, _, domain = address.rpartition("@")
    try:
        domain.encode("ascii")
    except UnicodeEncodeError:
        domain = domain.encode("idna").decode("ascii")
    return f"{local}@{domain}"


def write_file(mail: Mail, data: bytes) -> str:
    """Without a mail server: one .eml file per mail (a second attempt
    rewrites the same file), written whole or not at all."""
    folder = Path(conf.NIGHTJAR_MAIL_DIR)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{mail.registration.code}-{mail.kind}-{mail.pk}.eml"
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError as error:
        raise Refused(f"Could not write the mail to {folder}: {error}", permanent=False) from None
    return f"Written to {path}"


def sentence(code: int, text: bytes | str) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"{code} {' '.join(text.split())}".strip()


def smtp_send(from_header: str, to: str, data: bytes) -> str:
    """One connection per mail: connect, (STARTTLS, login), MAIL, RCPT, DATA.
    A 5xx answer to MAIL, RCPT or DATA is permanent; every other failure is
    temporary (a 5xx at connect or login is the server's or our setup's
    fault, not the guest's address). Every wait has NIGHTJAR_SMTP_TIMEOUT,
    and the whole conversation ATTEMPT_WAITS of them: a server that answers
    each line just in time still lets go of the sender."""
    from email.utils import parseaddr

    envelope_from = envelope_address(parseaddr(from_header)[1])
    timeout = conf.NIGHTJAR_SMTP_TIMEOUT
    host, port = conf.NIGHTJAR_SMTP_HOST, int(conf.NIGHTJAR_SMTP_PORT)
    deadline = time.monotonic() + ATTEMPT_WAITS * timeout
    too_long = f"The mail server {host}:{port} took longer than {ATTEMPT_WAITS * timeout:g} s for one mail"
    cut = False  # the step's wait was shortened to the attempt's deadline

    def in_time() -> None:
        """Before each step: its wait is at most what is left of the attempt's time."""
        nonlocal cut
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused(too_long, permanent=False)
        cut = left < timeout
        smtp.sock.settimeout(min(timeout, left))

    try:
        if conf.NIGHTJAR_SMTP_SSL:
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
    except smtplib.SMTPConnectError as error:
        raise Refused(sentence(error.smtp_code, error.smtp_error), permanent=False) from None
    except (OSError, smtplib.SMTPException) as error:
        raise Refused(f"No answer from {host}:{port}: {error or type(error).__name__}", permanent=False) from None
    try:
        in_time()
        smtp.ehlo_or_helo_if_needed()
        if conf.NIGHTJAR_SMTP_TLS:
            in_time()
            smtp.starttls(context=ssl.create_default_context())
            in_time()
            smtp.ehlo()
        if conf.NIGHTJAR_SMTP_USER:
            in_time()
            smtp.login(conf.NIGHTJAR_SMTP_USER, conf.NIGHTJAR_SMTP_PASSWORD)
        for command, args, accepted in (("mail", (envelope_from,), {250}), ("rcpt", (to,), {250, 251})):
            in_time()
            code, text = getattr(smtp, command)(*args)
            if code not in accepted:
                raise Refused(sentence(code, text), permanent=code >= 500)
        try:
            in_time()
            code, text = smtp.data(data)
        except smtplib.SMTPDataError as error:  # DATA itself refused (no 354): the message's answer too
            code, text = error.smtp_code, error.smtp_error
        if code != 250:
            raise Refused(sentence(code, text), permanent=code >= 500)
        return sentence(code, text)
    except smtplib.SMTPResponseException as error:  # login, STARTTLS, or an answer smtplib itself refuses
        raise Refused(sentence(error.smtp_code, error.smtp_error), permanent=False) from None
    except (OSError, smtplib.SMTPException) as error:  # a timeout, a dropped line
        if cut and time.monotonic() >= deadline:
            raise Refused(too_long, permanent=False) from None
        raise Refused(
            f"The mail server {host}:{port} broke off: {error or type(error).__name__}", permanent=False
        ) from None
    finally:
        try:
            if smtp.sock is not None:
                smtp.sock.settimeout(timeout)
            smtp.quit()  # after the acceptance, a failing QUIT changes nothing
        except (OSError, smtplib.SMTPException):
            smtp.close()
