"""What the engine needs from the app that uses it, in one place.

The engine (this app) moves bodies from a broker to a handler and never
imports its users. A user subclasses `Channel`, says what its bodies mean and
where its records live, and registers one instance at start-up:

    # tickets/apps.py
    def ready(self):
        from delivery import channel
        from tickets.channel import RegistrationsChannel
        channel.register(RegistrationsChannel())

The worker, the recording of what it saw (delivery/recording.py), the
`worker`, `reconcile` and `parked` commands, the metrics and the system
checks call `channel.current()`; nothing else of the user.

An intent is what the user stored before publishing (for tickets, a
registration) and is named by an integer key. A message is the user's
checked form of a body (any object); the engine only hands it back.
"""

from collections.abc import Callable, Iterable

from delivery.transport import Delivery


class HandlerError(Exception):
    """The handler cannot be loaded; str() is a short sentence for a person."""


class DomainError(Exception):
    """The user refused a staff request (the commands exit 1 with its sentence)."""


class Channel:
    """Override every method; each docstring is the promise the engine relies on."""

    # -- decoding and checking a body against the stored intent (the hot path) --

    def decode(self, body: bytes):
        """The message of a body, or raise delivery.codec.ContractError. Total:
        any other exception would make a poison body look like a failure."""
        raise NotImplementedError

    def intent_id(self, message) -> int:
        """The key of the intent a decoded message is about."""
        raise NotImplementedError

    def label(self, intent_id: int) -> str:
        """How people see an intent's key (the worker's lines, the desk)."""
        raise NotImplementedError

    def hinted_ids(self, bodies: list[bytes]) -> set[int]:
        """Keys these bodies seem to name, unchecked (for reading ahead). Never raises."""
        raise NotImplementedError

    def stored(self, ids: Iterable[int]) -> dict[int, tuple[object, float]]:
        """For each stored intent among ids: (what check_stored compares, when
        it was stored in seconds since the epoch). One query."""
        raise NotImplementedError

    def check_stored(self, message, stored) -> None:
        """Raise ContractError when the message is not a repeat of its stored
        intent (stored is None for an unknown key)."""
        raise NotImplementedError

    def made_since(self, intent_id: int, since) -> bool:
        """Whether the intent's outcome was written since then (latency metric only)."""
        raise NotImplementedError

    # -- the handlers --

    handler_help = ""  # what `worker --handler` says the default is

    def default_handler(self) -> str:
        """The dotted path or file of the handler the worker runs by default."""
        raise NotImplementedError

    def load_handler(self, spec: str) -> Callable:
        """The handle(message, ack, pause) function spec names; raise HandlerError."""
        raise NotImplementedError

    def handle_batch(self, messages: list, rejections: list[tuple[Delivery, str]], ack_all: Callable, pause):
        """Batch mode: handle the checked messages and record the rejections in
        one transaction, then call ack_all(). Returns the keys done now."""
        raise NotImplementedError

    # -- records: the user's concrete models of delivery/records.py --

    intent_model = None  # the model of the stored intents (Registration)
    intent_field = ""  # the records' foreign key to it ("registration")
    rejected_model = None  # subclasses of records.AbstractRejectedMessage,
    failure_model = None  # AbstractDeliveryFailure,
    redelivery_model = None  # AbstractRedelivery,
    parked_model = None  # AbstractParkedDelivery
    worker_report_model = None  # and AbstractWorkerReport

    def claimed_id(self, body: bytes) -> int | None:
        """The intent key a body names, however broken the rest is. Never raises."""
        raise NotImplementedError

    # -- reconcile and parking (the `reconcile` and `parked` commands) --

    def reconcile(self, *, limit: int, older_than: float, actor: str):
        """Collect dead letters, then republish pending intents older than the
        grace period. Returns a report with .collected (parked, requeued),
        .published (labels), .remaining and .passes; raises BrokerError."""
        raise NotImplementedError

    def collect_dead_letters(self):
        """Move the dead-letter queue into the records; a report with .parked,
        .requeued (labels), .dropped and .rejected."""
        raise NotImplementedError

    def requeue_parked(self, *, code: str, actor: str) -> str:
        """Publish a parked intent again; its label. Raise DomainError."""
        raise NotImplementedError

    def discard_parked(self, *, code: str, actor: str) -> str:
        """Give up on a parked intent; its label. Raise DomainError."""
        raise NotImplementedError

    def parked_lines(self) -> list[str]:
        """One line per parked delivery waiting for staff."""
        raise NotImplementedError

    def actor(self, command: str) -> str:
        """Who a command-line staff action is recorded as."""
        raise NotImplementedError

    # -- what only the web reads --

    def gauges(self) -> dict:
        """Scrape-time gauges: {"pending": n, "parked": n, "queue": counts or {}}."""
        raise NotImplementedError


_current: Channel | None = None


def register(channel: Channel) -> None:
    """Make channel the one the engine serves (once, in an AppConfig.ready())."""
    global _current
    _current = channel


def current() -> Channel:
    if _current is None:
        raise RuntimeError(
            "No delivery channel is registered: an app must call delivery.channel.register() in ready()."
        )
    return _current
