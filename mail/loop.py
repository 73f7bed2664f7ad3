"""The sender as a long-lived process (`manage.py send_mail --serve`): small
steps inside `while not self.shutdown`; SIGTERM and Ctrl+C only set the flag,
and the mail being sent is finished first. Its own process: a slow or dead
mail server never slows the ticket worker."""

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from django.db import DatabaseError, close_old_connections
from django.db.models import F
from django.utils import timezone

from mail.models import Mail
from mail.sender import Outcome, claim_due, deliver

logger = logging.getLogger(__name__)


class SenderLoop:
    def __init__(self, *, say: Callable[[str], None], health_file: str | None = None, poll: float = 1.0) -> None:
        self.say = say
        self.health_file = Path(health_file) if health_file else None
        self.poll = poll
        self.shutdown = False
        self.sent = 0
        self.woken = threading.Event()
        self.health_failures = 0

    def take_pass(self) -> int:
        """Claim one due mail and send it; how many were claimed. One at a
        time: a lease covers one attempt, however slow the server is with
        the mails claimed before it."""
        close_old_connections()
        mails = claim_due(limit=1)
        for index, mail in enumerate(mails):
            if self.shutdown:
                release(mails[index:])
                break
            self.tell(deliver(mail))
        return len(mails)

    def tell(self, outcome: Outcome) -> None:
        mail = outcome.mail
        self.sent += outcome.state == "sent"
        self.say(
            f"{mail.registration.code} {mail.kind} mail, attempt {mail.attempts}: {outcome.state} ({outcome.reply})"
        )

    def drain(self) -> int:
        """Send until nothing is due now; the number of mails sent."""
        while not self.shutdown and self.take_pass():
            pass
        return self.sent

    def serve(self) -> None:
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not self.shutdown:
                self.beat()
                try:
                    busy = self.take_pass()
                except DatabaseError:
                    logger.exception("The outbox could not be read; trying again in %s s", self.poll)
                    busy = 0
                if not busy:
                    self.woken.wait(self.poll)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self, signum, frame) -> None:
        self.shutdown = True
        self.woken.set()

    def beat(self) -> None:
        """Touch the health file (a probe checks its age), saying a failure once."""
        if self.health_file is None:
            return
        try:
            self.health_file.touch()
        except OSError as error:
            if not self.health_failures:
                logger.warning("Could not touch the health file %s: %s; trying on every pass", self.health_file, error)
            self.health_failures += 1
            return
        if self.health_failures:
            logger.info("The health file %s works again after %d failed tries", self.health_file, self.health_failures)
            self.health_failures = 0


def release(mails: list[Mail]) -> None:
    """Claimed mails not tried (the sender is stopping): due again at once, their attempt not counted."""
    Mail.objects.filter(pk__in=[mail.pk for mail in mails]).update(
        next_attempt=timezone.now(), attempts=F("attempts") - 1
    )
