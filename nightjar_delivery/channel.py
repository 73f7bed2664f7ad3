"""What the engine needs from the apps that use it, in one place.

The engine (this app) moves bodies from a broker to a handler and never
imports its users. A user subclasses `Channel`, names it, says which broker
queue it uses, what its bodies mean and where its records live, and registers
one instance at start-up:

    # tickets/apps.py
    def ready(self):
        from nightjar_delivery import channel
        from tickets.channel import RegistrationsChannel
        channel.register(RegistrationsChannel())  # name "registrations", queue NIGHTJAR_QUEUE

Several channels may be registered, each with its own unique `name` and its
own `queue` (the transport derives the dead-letter queue from it: `<queue>.dead`):

- `register(ch)`: add a channel (ValueError for a name already taken by another).
- `get(name)`: the channel of that name (LookupError naming the registered ones).
- `all()`: the registered channels, in registration order.
- `select(name)`: make it the process's channel (`worker/reconcile/parked
  --channel NAME`); None goes back to the default.
- `current()`: the process's channel, for code that serves one: the selected
  one, else "registrations" when registered, else the only one registered,
  else LookupError listing the names.

The worker, the recording of what it saw (nightjar_delivery/recording.py), the
`worker`, `reconcile` and `parked` commands, the metrics and the system
checks call `channel.current()`; nothing else of the user. Everything that
touches the broker passes the channel's queue explicitly:
`transport.publish(body, message_id=..., queue=ch.queue)`,
`transport.Consumer(prefetch=..., queue=ch.queue)`, `transport.queue_counts(ch.queue)`.

An intent is what the user stored before publishing (for tickets, a
registration) and is named by an integer key. A message is the user's
checked form of a body (any object); the engine only hands it back.
"""

from collections.abc import Callable, Iterable

from nightjar_delivery.transport import Delivery


class HandlerError(Exception):
    """The handler cannot be loaded; str() is a short sentence for a person."""


class DomainError(Exception):
    """The user refused a staff request (the commands exit 1 with its sentence)."""


class Channel:
    """Override every method; each docstring is the promise the engine relies on."""

    name = ""  # unique among the registered channels ("registrations")
    intents = "intents"  # what people call its intents, in the plural (the worker's "No ready registrations")
    outcome = "outcome"  # what a done intent has (tickets: "ticket"; tasks: "result"), in the commands' lines

    @property
    def queue(self) -> str:
        """The broker queue its intents travel on (read when used: a test's settings override wins)."""
        raise NotImplementedError

    # -- decoding and checking a body against the stored intent (the hot path) --

    def decode(self, body: bytes):
        """The message of a body, or raise nightjar_delivery.codec.ContractError. Total:
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
        it was stored in seconds since the epoch). One query ({} without one for no ids)."""
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

    def handle_batch(
        self, messages: list, rejections: list[tuple[Delivery, str]], ack_all: Callable, pause, stored: dict
    ):
        """Batch mode: handle the checked messages and record the rejections in
        one transaction, then call ack_all(). Returns the keys done now.
        stored: what `stored` returned for the batch's keys, read by the
        screen just before (outside the transaction): the user may take its
        rows from there rather than read them a second time."""
        raise NotImplementedError

    # -- records: the user's concrete models of nightjar_delivery/records.py --

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

    # -- reconcile and parking (nightjar_delivery/reconcile.py runs them; these are the domain's answers) --

    refusal = DomainError  # what the channel's refusals are (a subclass of DomainError)

    def pending(self, *, stored_before, after=None, limit: int) -> list:
        """Up to limit intents stored before that datetime and not done yet
        (nor parked, nor unsafe to deliver again), oldest first, after the
        intent `after` (the last one of the previous pass) when given."""
        raise NotImplementedError

    def pending_count(self, *, stored_before, after=None) -> int:
        """How many pending() would list without a limit."""
        raise NotImplementedError

    def publish(self, intent) -> None:
        """Publish one delivery of a stored intent on self.queue; raises BrokerError.
        Never called inside a transaction: it waits on the network."""
        raise NotImplementedError

    def republished(self, intents: list, *, actor: str, older_than: float) -> None:
        """Note in their history that reconcile published these again (one statement)."""
        raise NotImplementedError

    def settled(self, intent_id: int) -> bool:
        """Whether a dead letter of this intent needs nothing: done, or not to
        be delivered again (tickets: a ticket without its key)."""
        raise NotImplementedError

    def find(self, label: str):
        """The intent people call label; raise self.refusal when there is none."""
        raise NotImplementedError

    def refuse_republish(self, intent, what: str) -> None:
        """Raise self.refusal when the intent must not be published again
        (`what` completes "it is not ...": "requeued")."""
        raise NotImplementedError

    def record_staff_action(self, *, actor: str, action: str, intent, detail: str) -> None:
        """The trace of a staff change, inside its transaction."""
        raise NotImplementedError

    def actor(self, command: str) -> str:
        """Who a command-line staff action is recorded as."""
        raise NotImplementedError

    # -- what only the web reads --

    def gauges(self) -> dict:
        """Scrape-time gauges: {"pending": n, "parked": n, "queue": counts or {}}."""
        raise NotImplementedError


DEFAULT = "registrations"  # current()'s choice when several are registered and none is selected

_channels: dict[str, Channel] = {}
_selected: str | None = None


def register(channel: Channel) -> None:
    """Add channel to those the engine serves (in an AppConfig.ready()).
    Registering the same name again replaces it only with an instance of the same class."""
    if not channel.name:
        raise ValueError(f"{type(channel).__name__} has no name.")
    known = _channels.get(channel.name)
    if known is not None and type(known) is not type(channel):
        raise ValueError(f"A channel named {channel.name!r} is already registered ({type(known).__name__}).")
    _channels[channel.name] = channel


def unregister(name: str) -> None:
    """Forget a channel (tests)."""
    global _selected
    _channels.pop(name, None)
    if _selected == name:
        _selected = None


def all() -> list[Channel]:  # noqa: A001 (channel.all() reads as the registry's)
    return list(_channels.values())


def names() -> str:
    return ", ".join(_channels) or "none"


def get(name: str) -> Channel:
    try:
        return _channels[name]
    except KeyError:
        raise LookupError(f"No delivery channel is named {name!r} (registered: {names()}).") from None


def select(name: str | None) -> Channel | None:
    """Make the named channel this process's current() one; None: back to the default."""
    global _selected
    if name is None:
        _selected = None
        return None
    chosen = get(name)
    _selected = name
    return chosen


def current() -> Channel:
    if _selected is not None:
        return get(_selected)
    if DEFAULT in _channels:
        return _channels[DEFAULT]
    if len(_channels) == 1:
        return next(iter(_channels.values()))
    if not _channels:
        raise LookupError(
            "No delivery channel is registered: an app must call nightjar_delivery.channel.register() in ready()."
        )
    raise LookupError(f"Several delivery channels are registered ({names()}): name one with --channel NAME.")
