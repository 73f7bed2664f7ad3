"""A real SMTP server for the tests and the soak (aiosmtpd, on loopback, in a
thread of the caller): it speaks real SMTP, records what it accepted, and
can be told to refuse for now (4xx), refuse for good (5xx), answer slowly,
vanish and come back on the same port, or run a callback when a message's
data has arrived (before it answers: a test kills the sender there)."""

import asyncio
import email
import email.policy
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller

from devtools.ports import free_port


@dataclass
class Received:
    sender: str
    recipients: list[str]
    data: bytes
    at: float = 0.0  # time.monotonic() when it was accepted

    @property
    def message(self) -> email.message.EmailMessage:
        return email.message_from_bytes(self.data, policy=email.policy.default)

    @property
    def message_id(self) -> str:
        return self.message["Message-ID"]


@dataclass
class Rules:
    """How the server answers now. rcpt: address -> an answer such as
    "550 5.1.1 No such user" (for every RCPT when the key is "*");
    data_answer: the answer to DATA instead of 250; delay: seconds before
    each answer to DATA; on_data: called with what arrived, before answering;
    temporary: this share of RCPTs (0-1, drawn at random) answered 451."""

    rcpt: dict[str, str] = field(default_factory=dict)
    step_delay: float = 0.0  # seconds before answering each of EHLO, MAIL, RCPT and DATA
    temporary: float = 0.0
    dice: random.Random = field(default_factory=random.Random)
    data_answer: str = ""
    delay: float = 0.0
    on_data: Callable[["Received"], None] | None = None


class _Handler:
    def __init__(self, server: "MailServer") -> None:
        self.server = server

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        await asyncio.sleep(self.server.rules.step_delay)
        session.host_name = hostname
        return responses

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        await asyncio.sleep(self.server.rules.step_delay)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        rules = self.server.rules
        await asyncio.sleep(rules.step_delay)
        answer = rules.rcpt.get(address) or rules.rcpt.get("*")
        if answer:
            return answer
        if rules.temporary and rules.dice.random() < rules.temporary:
            self.server.refused += 1
            return "451 4.3.0 Temporary refusal (injected), try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        rules = self.server.rules
        if rules.delay or rules.step_delay:
            await asyncio.sleep(rules.delay or rules.step_delay)
        if rules.data_answer:
            return rules.data_answer
        received = Received(
            envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.original_content), at=time.monotonic()
        )
        with self.server.lock:
            self.server.received.append(received)
        if rules.on_data:
            rules.on_data(received)
        return "250 2.0.0 Queued, thank you"


class MailServer:
    """`with MailServer() as server:` — server.port, server.received, server.rules."""

    def __init__(self, port: int | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.rules = Rules()
        self.received: list[Received] = []
        self.refused = 0  # temporary refusals injected
        self.lock = threading.Lock()
        self._controller: Controller | None = None

    def start(self) -> "MailServer":
        self._controller = Controller(_Handler(self), hostname=self.host, port=self.port, ready_timeout=10)
        self._controller.start()
        return self

    def stop(self) -> None:
        """Vanish: nothing listens on the port until start()."""
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> "MailServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def to(self, address: str) -> list[Received]:
        with self.lock:
            return [received for received in self.received if address in received.recipients]
