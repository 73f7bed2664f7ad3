"""What the engine needs from the apps that use it, in one place.

The engine (this app) moves bodies from a broker to a handler and never
imports its users. A user subclasses `Channel`, writes its abstract methods
(what only its domain can answer: decode, intent_id, check_stored,
default_handler, handle_batch, publish, due, settled), names it, its queue
and its record models, and registers it at start-up; the rest has defaults
derived from those models (override one to answer faster or otherwise):

    # myapp/apps.py
    def ready(self):
        from nightjar_delivery import register
        from myapp.channel import OrdersChannel
        register(OrdersChannel)  # refused, naming what is missing, when incomplete

Several channels may be registered, each with its own unique `name` and its
own `queue` (the transport derives the dead-letter queue from it: `<queue>.dead`).
The registry (a user reaches `register` and `get` as nightjar_delivery.register
and nightjar_delivery.get_channel; the rest is the engine's):

- `register(ch)`: add a channel (a class or an instance); ImproperlyConfigured
  naming what is missing, ValueError for a name already taken by another.
- `get(name)`: the channel of that name (LookupError naming the registered ones).
- `all()`: the registered channels, in the order they were registered.
- `select(name)`: make it the process's channel (`worker/reconcile/parked
  --channel NAME`); None goes back to the default.
- `current()`: the process's channel, for code that serves one: the selected
  one, else `default()`: the one NIGHTJAR_DEFAULT_CHANNEL names when
  registered, else the only one registered, else LookupError listing the names.

The worker, the `worker`, `reconcile` and `parked` commands, the metrics and
the system checks call `channel.current()`; the recording of what the worker
saw (nightjar_delivery/recording.py) is handed its channel. Everything that
touches the broker passes the channel's queue explicitly:
`transport.publish(body, message_id=..., queue=ch.queue)`,
`transport.Consumer(prefetch=..., queue=ch.queue)`, `transport.queue_counts(ch.queue)`.

An intent is what the user stored before publishing (an order, a task) and
is named by an integer key. A message is the user's checked form of a body
(any object); the engine only hands it back.
"""

import abc
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_delivery import actors, conf, transport
from nightjar_delivery.transport import Delivery

if TYPE_CHECKING:
    from nightjar_delivery import records  # models: imported at run time once the app registry is ready
    from nightjar_delivery.checkpoints import Pause


class Observer(Protocol):
    """What Channel.latency is: a histogram (nightjar_delivery.metrics.Histogram)."""

    def observe(self, amount: float) -> None: ...


class HandlerError(Exception):
    """The handler cannot be loaded; str() is a short sentence for a person."""


class DomainError(Exception):
    """The user refused a staff request (the commands exit 1 with its sentence)."""


class Channel(abc.ABC):
    """A user writes the abstract methods (what only its domain can answer)
    and names its models; the rest has defaults derived from those models,
    as ModelAdmin's come from its model. Each docstring is the promise the
    engine relies on; override a default only to answer faster or otherwise."""

    name = ""  # unique among the registered channels
    intents = "intents"  # what people call its intents, in the plural (the worker's "No ready intents")
    outcome = "outcome"  # what a done intent has (e.g. "result"), in the commands' lines
    handler_help = ""  # what `worker --handler` says the default is ("": default_handler())
    teaches_checkpoints = False  # True: `worker --help` shows the crash-window switches (--pause, --crash)
    # `worker --serve`'s reconcile period without --reconcile-every (None: no reconcile): a channel
    # whose retries wait for reconcile to publish them (the tasks') must not depend on a flag.
    serve_reconcile_every: float | None = None
    refusal: type[DomainError] = DomainError  # what the channel's refusals are (a subclass of DomainError)
    # True: its handler has an effect outside the database (a mail, another service's API). The worker
    # refuses batch mode for it: a failed batch is retried one delivery at a time, which would repeat
    # the effects its neighbours already had. Each delivery alone: one failure repeats only its own.
    effects_outside_database = False

    @property
    def queue(self) -> str:
        """The broker queue its intents travel on: a subclass sets it (a class
        attribute, or a property that reads a setting when used)."""
        return ""

    # -- records: the user's concrete models of nightjar_delivery/records.py --
    # Declared, not set: a subclass names them (problems() says which are missing).

    # the model of the stored intents (read through _default_manager, as Django's own code reads a model it
    # does not know: its manager may have another name than objects)
    intent_model: type[models.Model]
    intent_field = ""  # the records' foreign key to it
    intent_time_field = ""  # its DateTimeField of when an intent was stored (stored() and pending() read it)
    rejected_model: type["records.AbstractRejectedMessage"]
    failure_model: type["records.AbstractDeliveryFailure"]
    redelivery_model: type["records.AbstractRedelivery"]
    parked_model: type["records.AbstractParkedDelivery"]
    worker_report_model: type["records.AbstractWorkerReport"]
    # optional: a model with actor, action, detail and the intent_field foreign key
    staff_action_model: type[models.Model] | None = None

    # -- what only the domain can answer --

    @abc.abstractmethod
    def decode(self, body: bytes) -> Any:
        """The message of a body, or raise nightjar_delivery.codec.ContractError. Total:
        any other exception would make a poison body look like a failure."""

    @abc.abstractmethod
    def intent_id(self, message: Any) -> int:
        """The key of the intent a decoded message is about."""

    @abc.abstractmethod
    def check_stored(self, message: Any, stored: Any) -> None:
        """Raise ContractError when the message is not a repeat of its stored
        intent (stored: what stored() keeps of it, None for an unknown key)."""

    @abc.abstractmethod
    def default_handler(self) -> str:
        """The dotted path (or what load_handler takes) of the handler the worker runs by default."""

    @abc.abstractmethod
    def handle_batch(
        self,
        messages: list[Any],
        rejections: list[tuple[Delivery, str]],
        ack_all: Callable[[], None],
        pause: "Pause | None",
        stored: dict[int, Any],
    ) -> Iterable[int] | None:
        """Batch mode: handle the checked messages and record the rejections
        (recording.record_rejection(..., channel=self)) in one transaction, then
        call ack_all(). Returns the keys done now. stored: what `stored`
        returned for the batch's keys, read by the screen just before (outside
        the transaction): the user may take its rows from there rather than
        read them a second time."""

    @abc.abstractmethod
    def publish(self, intent: Any) -> None:
        """Publish one delivery of a stored intent on self.queue; raises BrokerError.
        On a broker never called inside a transaction (it waits on the
        network); on the database transport publish_on_commit calls it inside
        the intent's transaction, whose commit the message then joins."""

    def publish_soon(self, intent: Any, *, on_failure: Callable[[transport.BrokerError], object]) -> None:
        """publish_after_commit(wait=False): publish without waiting for the
        broker's answer where the transport can (transport.publish_soon);
        on_failure(BrokerError) hears of a failure, maybe from another thread.
        By default: publish(), its error told to on_failure."""
        from nightjar_delivery import transport

        try:
            self.publish(intent)
        except transport.BrokerError as error:
            on_failure(error)

    @abc.abstractmethod
    def due(self, *, stored_before: datetime) -> "models.QuerySet[Any]":
        """A QuerySet of intent_model: the intents stored before that datetime
        and not done yet (nor parked, nor unsafe to deliver again), which
        reconcile publishes again."""

    @abc.abstractmethod
    def settled(self, intent_id: int) -> bool:
        """Whether a dead letter of this intent needs nothing: done, or not to
        be delivered again."""

    # -- derived from the above and the models --

    def label(self, intent_id: int, /) -> str:
        """How people see an intent's key (the worker's lines, the desk)."""
        return str(intent_id)

    def key(self, label: str, /) -> int:
        """The key of the intent people call label (find's first step); raise self.refusal."""
        try:
            return int(str(label).strip())
        except ValueError:
            raise self.refusal(f"{label!r} is not a key of {self.intents}.") from None

    def claimed_id(self, body: bytes) -> int | None:
        """The intent key a body names, however broken the rest is (by default
        only a body that decodes names one: override to link broken ones to
        their intent). Never raises."""
        try:
            return self.intent_id(self.decode(body))
        except Exception:
            return None

    def hinted_ids(self, bodies: list[bytes]) -> set[int]:
        """Keys these bodies seem to name, unchecked (for reading ahead). Never raises."""
        return {key for key in map(self.claimed_id, bodies) if key is not None}

    def stored(self, ids: Iterable[int]) -> dict[int, tuple[Any, float]]:
        """For each stored intent among ids: (what check_stored compares, here
        the row, when it was stored in seconds since the epoch). One query ({}
        without one for no ids)."""
        ids = set(ids)
        if not ids:
            return {}
        return {
            pk: (row, getattr(row, self.intent_time_field).timestamp())
            for pk, row in self.intent_model._default_manager.in_bulk(ids).items()
        }

    def made_since(self, intent_id: int, since: datetime | None) -> bool:
        """Whether the intent's outcome was written since then (latency metric
        only; False: a redelivery's latency is not observed)."""
        return False

    latency: "Observer | None" = None  # a histogram of stored -> done seconds (the worker observes it)

    def load_handler(self, spec: str) -> Callable[..., Any]:
        """The handle(message, ack, pause) function spec names; raise HandlerError."""
        try:
            return import_string(spec)
        except ImportError as error:
            raise HandlerError(f"Cannot load the handler {spec!r}: {error}") from None

    # -- reconcile and parking (nightjar_delivery/reconcile.py runs them) --

    def _after(self, due: "models.QuerySet[Any]", after: Any) -> "models.QuerySet[Any]":
        """due past the intent `after` in (stored time, key) order: reconcile's keyset cursor."""
        if after is None:
            return due
        field, moment = self.intent_time_field, getattr(after, self.intent_time_field)
        return due.filter(Q(**{f"{field}__gt": moment}) | Q(**{field: moment, "pk__gt": after.pk}))

    def pending(self, *, stored_before: datetime, after: Any = None, limit: int) -> list[Any]:
        """Up to limit due() intents, oldest first, after the intent `after`
        (the last one of the previous pass) when given."""
        due = self.due(stored_before=stored_before).order_by(self.intent_time_field, "pk")
        return list(self._after(due, after)[:limit])

    def pending_count(self, *, stored_before: datetime, after: Any = None) -> int:
        """How many pending() would list without a limit."""
        return self._after(self.due(stored_before=stored_before), after).count()

    def republished(self, intents: list[Any], *, actor: str, older_than: float) -> None:
        """Note in their history that reconcile published these again (one statement)."""
        if self.staff_action_model is not None:
            detail = f"Reconcile published it again (not done {older_than:g} s after it was stored)."
            self.staff_action_model._default_manager.bulk_create(
                self.staff_action_model(actor=actor[:150], action="republish", detail=detail, **{self.intent_field: i})
                for i in intents
            )

    def find(self, label: str) -> Any:
        """The intent people call label; raise self.refusal when there is none."""
        intent = self.intent_model._default_manager.filter(pk=self.key(label)).first()
        if intent is None:
            raise self.refusal(f"There is no {label!r}.")
        return intent

    def refuse_republish(self, intent: Any, what: str) -> None:
        """Raise self.refusal when the intent must not be published again
        (`what` completes "it is not ...": "requeued")."""
        if self.settled(intent.pk):
            raise self.refusal(f"{self.label(intent.pk)} needs nothing: it is not {what}.")

    def record_staff_action(self, *, actor: str, action: str, intent: Any, detail: str) -> None:
        """The trace of a staff change, inside its transaction (staff_action_model's row, when there is one)."""
        if self.staff_action_model is not None:
            self.staff_action_model._default_manager.create(
                actor=actor[:150], action=action[:40], detail=detail[:500], **{self.intent_field: intent}
            )

    def on_park(self, intent: Any, *, reason: str, deaths: int) -> None:  # noqa: B027 (a hook: nothing by default)
        """This intent is being parked (recording.park, inside its
        transaction): reason, as the parked record says it; deaths, how many
        of its failed attempts were its worker dying on it. E.g. a task
        made FAILED saying so. By default nothing."""

    def on_requeue(self, intent: Any) -> None:  # noqa: B027 (a hook: nothing by default)
        """Staff requeued this parked intent: make it deliverable again, inside
        requeue_parked's transaction, before it is published after the commit
        (e.g. a failed task back to ready with a fresh retry budget). By
        default nothing: a parked intent is pending again once its parked
        record is resolved."""

    def actor(self, command: str) -> str:
        """Who a command-line staff action is recorded as (nightjar_delivery.actor's one spelling)."""
        return actors.actor(command=command)

    # -- what only the web reads --

    def pending_now(self) -> "models.QuerySet[Any]":
        """A QuerySet of intent_model: what the pending gauge counts (by default due() now)."""
        return self.due(stored_before=timezone.now())

    def parked_waiting(self) -> "models.QuerySet[Any]":
        """A QuerySet of parked_model: this channel's parked records waiting for staff (the parked gauge)."""
        return self.parked_model.objects.filter(resolution="")

    def gauges(self) -> dict[str, Any]:
        """Scrape-time gauges: {"pending": n, "parked": n, "queue": counts or {}}
        (pending_now() and parked_waiting() counted, the broker's counts of the queue)."""
        try:
            counts = transport.queue_counts(self.queue)
        except transport.BrokerError:
            counts = {}
        return {"pending": self.pending_now().count(), "parked": self.parked_waiting().count(), "queue": counts}


def problems(channel: "Channel | type[Channel]") -> list[str]:
    """What keeps a channel (or its class) from serving, each in a few words; [] when complete."""
    from nightjar_delivery import records  # models: imported once the app registry is ready

    kind = channel if isinstance(channel, type) else type(channel)
    found = []
    if kind.__abstractmethods__:
        found.append(f"it does not define {', '.join(sorted(kind.__abstractmethods__))}")
    if not channel.name:
        found.append("its name is empty")
    if not isinstance(channel, type) and not (isinstance(channel.queue, str) and channel.queue.strip()):
        found.append("its queue is empty")
    intent = getattr(channel, "intent_model", None)  # declared on Channel, set by a subclass
    if not (isinstance(intent, type) and issubclass(intent, models.Model)):
        found.append("intent_model is not set to a model")
        intent = None
    if not channel.intent_field:
        found.append("intent_field is not set")
    for attribute, abstract in [
        ("rejected_model", records.AbstractRejectedMessage),
        ("failure_model", records.AbstractDeliveryFailure),
        ("redelivery_model", records.AbstractRedelivery),
        ("parked_model", records.AbstractParkedDelivery),
        ("worker_report_model", records.AbstractWorkerReport),
    ]:
        model = getattr(channel, attribute, None)
        if not (isinstance(model, type) and issubclass(model, abstract)):
            found.append(f"{attribute} is not a subclass of records.{abstract.__name__}")
        elif intent is not None and channel.intent_field and abstract is not records.AbstractWorkerReport:
            try:
                related = model._meta.get_field(channel.intent_field).related_model
            except FieldDoesNotExist:
                related = None
            if related is not intent:
                found.append(f"{attribute} has no foreign key {channel.intent_field!r} to {intent.__name__}")
    derived = [m for m in ("stored", "pending", "pending_count") if getattr(kind, m) is getattr(Channel, m)]
    if derived and intent is not None:
        try:
            intent._meta.get_field(channel.intent_time_field)
        except FieldDoesNotExist:
            found.append(f"intent_time_field names no field of {intent.__name__} (the default {derived[0]}() reads it)")
    return found


_channels: dict[str, Channel] = {}
_selected: str | None = None


def register(channel: "Channel | type[Channel]") -> Channel:
    """Add channel to those the engine serves (in an AppConfig.ready()); a
    class is instantiated with no arguments. ImproperlyConfigured, naming
    what is missing, for an incomplete one. Registering the same name again
    replaces it only with an instance of the same class."""
    if isinstance(channel, type) and issubclass(channel, Channel) and not channel.__abstractmethods__:
        channel = channel()
    kind = channel if isinstance(channel, type) else type(channel)
    if not issubclass(kind, Channel):
        raise ImproperlyConfigured(f"{kind.__name__} is not a subclass of nightjar_delivery.Channel.")
    found = problems(channel)
    if found or isinstance(channel, type):  # a class left here is abstract: problems() names what it lacks
        raise ImproperlyConfigured(f"The delivery channel {kind.__name__} cannot be registered: {'; '.join(found)}.")
    known = _channels.get(channel.name)
    if known is not None and type(known) is not type(channel):
        raise ValueError(f"A channel named {channel.name!r} is already registered ({type(known).__name__}).")
    _channels[channel.name] = channel
    return channel


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


def default() -> Channel:
    """The channel NIGHTJAR_DEFAULT_CHANNEL names when it is registered, else
    the only one registered, else LookupError listing the names."""
    name = conf.NIGHTJAR_DEFAULT_CHANNEL
    if name in _channels:
        return _channels[name]
    if len(_channels) == 1:
        return next(iter(_channels.values()))
    if not _channels:
        raise LookupError(
            "No delivery channel is registered: an app must call nightjar_delivery.channel.register() in ready()."
        )
    raise LookupError(f"Several delivery channels are registered ({names()}): name one with --channel NAME.")


def current() -> Channel:
    """The process's channel: the one selected (--channel), else default()."""
    return get(_selected) if _selected is not None else default()


# The tools' queue when none is named (transport.queue_name): the default channel's.
transport.default_queue = lambda: default().queue
