"""The transport seam: how intents travel from the web to the worker.

The worker and the services speak only to this small interface: publish,
a Consumer (get, consume, ack after commit, hand back, keepalive, close),
counts for status, and a few tools. Each broker client library is imported in
one module of this package and nowhere else: pika in `amqp.py` (RabbitMQ, the
default), redis-py in `redis_streams.py`; the database transport (`database.py`) uses
the project's own database through Django. The broker URL's scheme
(NIGHTJAR_BROKER_URL, or RABBITMQ_URL) chooses: amqp://, redis://, or
db://<alias> (a Django database alias: the queue is rows of that database).
"""

import contextlib
import importlib
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from nightjar_delivery import conf


class BrokerError(Exception):
    """The broker is unreachable, refused the message, or the connection broke.
    Every transport raises this and only this; str() is a sentence for a person."""


class Delivery(NamedTuple):
    """One publication as the broker handed it over: for ack and diagnosis only.
    The intent's key inside the body is the identity, never these fields.
    Immutable, and a NamedTuple because the worker makes one per delivery (a
    frozen dataclass costs twice as much to create)."""

    body: bytes
    tag: int | str  # opaque: what ack() and requeue() take back
    redelivered: bool
    message_id: str
    # How many times the broker had handed it out before (RabbitMQ before
    # 4.3 and Redis: every return; RabbitMQ 4.3: failures only); past
    # NIGHTJAR_DELIVERY_LIMIT of them the broker's backstop dead-letters it.
    # Parking is the worker's own count of failures (nightjar_delivery.recording.park_after_failures).
    attempts: int = 0


# The default channel's queue, as a function: set by nightjar_delivery.channel
# when it is imported (this package imports no channel).
default_queue: Callable[[], str] | None = None


def queue_name() -> str:
    """The default channel's queue (channel.default(), whichever is selected):
    the queue of the tools below when none is named."""
    if default_queue is None:
        raise LookupError("No delivery channel is registered: name a queue.")
    return default_queue()


def dead_letter_queue_name(queue: str | None = None) -> str:
    """Where a queue's dead letters go (RabbitMQ's queue, Redis's stream, memory's list)."""
    return f"{queue or queue_name()}.dead"


# memory:// is the fast test tier's in-process stand-in (memory.py), never a deployment's.
SCHEMES = {
    "amqp": "amqp",
    "amqps": "amqp",
    "redis": "redis_streams",
    "rediss": "redis_streams",
    "db": "database",
    "memory": "memory",
}
NAMES = {
    "amqp": "RabbitMQ",
    "redis_streams": "Redis",
    "database": "the database queue",
    "memory": "the in-memory broker",
}


def kind() -> str:
    """amqp, redis_streams or database, from the broker URL's scheme."""
    scheme = urlsplit(conf.NIGHTJAR_BROKER_URL.split(";")[0]).scheme
    if scheme not in SCHEMES:
        raise BrokerError(f"The broker URL's scheme {scheme!r} is none of {', '.join(SCHEMES)}.")
    return SCHEMES[scheme]


def name() -> str:
    """The broker's name for people: RabbitMQ or Redis."""
    return NAMES[kind()]


# Who dead-letters a delivery that goes back too often (no failure recorded),
# after "It has gone back N time(s); ": the worker's Ctrl+C message.
RETURN_LIMITS = {
    "amqp": "RabbitMQ before 4.3 counts returns too and past {limit} moves it to the dead-letter queue",
    "redis_streams": "past {limit} returns the worker moves it to the dead-letter stream",
    "database": "past {limit} returns the worker moves it to the dead-letter queue",
}


def past_the_return_limit(limit: int) -> str:
    return RETURN_LIMITS[kind()].format(limit=limit)


def joins_transactions(using: str) -> bool:
    """Whether a publish made inside a transaction on the database `using`
    is part of that transaction (commits with it or not at all): the
    database transport's, when `using` holds its queue. A broker's never is."""
    return kind() == "database" and backend().alias() == using


def backend() -> ModuleType:
    """The module that implements the transport the broker URL names."""
    return importlib.import_module(f"nightjar_delivery.transport.{kind()}")


class Backoff:
    """After a failed publish, further publishes fail at once for a while (1 s,
    doubling up to 30 s): a broker that is down costs no per-request wait."""

    START = 1.0
    MAX = 30.0

    def __init__(self) -> None:
        self.until = 0.0
        self.seconds = self.START

    def check(self) -> None:
        if time.monotonic() < self.until:
            raise BrokerError(f"{name()} was unavailable moments ago; this publish is left for reconcile.")

    def failed(self) -> None:
        self.until = time.monotonic() + self.seconds
        self.seconds = min(self.seconds * 2, self.MAX)

    def succeeded(self) -> None:
        self.seconds = self.START


def publish(body: bytes, *, message_id: str, queue: str) -> None:
    """Publish durably to queue, waiting at most NIGHTJAR_BROKER_TIMEOUT. Raises BrokerError."""
    backend().publisher.publish(body, message_id=message_id, queue=queue)


def publish_soon(body: bytes, *, message_id: str, queue: str, on_failure: Callable[[BrokerError], None]) -> None:
    """Publish without waiting for the broker's answer where the transport
    has a publisher thread (RabbitMQ); on_failure(error) hears of a failure,
    maybe from that thread. Elsewhere the publish as publish() does it."""
    publisher = backend().publisher
    if hasattr(publisher, "publish_soon"):
        publisher.publish_soon(body, message_id=message_id, queue=queue, on_failure=on_failure)
        return
    try:
        publish(body, message_id=message_id, queue=queue)
    except BrokerError as error:
        on_failure(error)


def reset() -> None:
    """Forget connections and backoff (tests, and after a fork)."""
    backend().publisher.reset()


def Consumer(*, prefetch: int = 1, queue: str) -> Any:  # noqa: N802 (a factory that reads as the class it returns)
    """The worker's side of one queue (and its dead-letter queue). Besides get/consume/ack/ack_many/requeue/keepalive/
    close, `lost` lists entries the broker dropped before they were handled
    (Redis: trimmed while pending); the worker records and empties it."""
    return backend().Consumer(prefetch=prefetch, queue=queue)


def ack_within(consumer: object, deliveries: list[Delivery], *, using: str) -> AbstractContextManager[object]:
    """Around the handler: where the consumer can (the database transport,
    when `using`, the database of the handler's commit, holds the queue), the
    deliveries' ack joins the next commit on that database, so a crash after
    it leaves nothing to redeliver. Elsewhere nothing: the ack after commit."""
    method = getattr(consumer, "ack_within", None)
    return method(deliveries, using=using) if method is not None else contextlib.nullcontext()


def acked_within(consumer: object, delivery: Delivery | None) -> bool:
    """Whether ack_within's commit removed this delivery (None: any, a batch's) and its ack is yet to come."""
    done = getattr(consumer, "acked_in_transaction", ())
    return delivery.tag in done if delivery is not None else bool(done)


def queue_counts(queue: str) -> dict[str, Any]:
    """A queue's counts now: ready, unacked (+ unacked_error), consumers, dead, and per transport more."""
    return backend().queue_counts(queue)


def ping() -> None:
    backend().ping()


def masked_url(url: str | None = None) -> str:
    """The broker URL (or `;`-separated URLs) with passwords hidden, for logs and messages."""

    def mask(one: str) -> str:
        parts = urlsplit(one)
        if parts.password is None:
            return parts.geturl()
        return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()

    given = url or conf.NIGHTJAR_BROKER_URL
    return ";".join(mask(one.strip()) for one in given.split(";") if one.strip())


# Tools (the lab's reset, verify_handler, tests): queue None is the default channel's.
def purge_queues(queue: str | None = None) -> None:
    backend().purge_queues(queue)


def delete_queues(queue: str | None = None) -> None:
    backend().delete_queues(queue)


def publish_raw(bodies: list[bytes], *, dead: bool = False, queue: str | None = None) -> None:
    """Publish bodies exactly as given, without the contract: tests and
    diagnosis tools playing a client that is not Nightjar's."""
    backend().publish_raw(bodies, dead=dead, queue=queue)


# The signals the worker acts on: Ctrl+C, SIGTERM, and the task time limit's alarm.
WORKER_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM}


def background_thread() -> None:
    """First call of every thread the transports start: it never takes the
    worker's signals. A signal the kernel hands to another thread does not
    interrupt the main thread's blocking call (a body's sleep or socket read),
    so a Ctrl+C or a time limit would wait for that call to end."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
