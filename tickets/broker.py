"""Everything that speaks AMQP. pika is imported here and nowhere else.

Topology (declared idempotently by publisher and worker alike):
- `<NIGHTJAR_QUEUE>`: a durable quorum queue. Its delivery limit makes
  RabbitMQ dead-letter a message that keeps failing instead of looping forever.
- `<NIGHTJAR_QUEUE>.dead`: where those messages end up, for a person to look at.
Messages go through the default exchange, persistent, with publisher confirms
and mandatory=True, so "published" means "RabbitMQ has it on disk in a queue".
"""

import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urljoin, urlsplit
from urllib.request import Request, urlopen

import pika
import pika.exceptions
from django.conf import settings

logger = logging.getLogger(__name__)

# Short defaults so a dead or blocked broker fails a request fast; each can
# still be set in RABBITMQ_URL's query string (?socket_timeout=5).
URL_DEFAULTS = {
    "connection_attempts": 1,
    "socket_timeout": 2.0,
    "stack_timeout": 5.0,
    "blocked_connection_timeout": 5.0,
}
# After a failed publish, further publishes fail at once for this long (then
# twice as long, up to the maximum): a down broker costs no per-request wait.
PUBLISH_BACKOFF_START = 1.0
PUBLISH_BACKOFF_MAX = 30.0


class BrokerError(Exception):
    """RabbitMQ is unreachable, refused the message, or the connection broke."""


def queue_name() -> str:
    return settings.NIGHTJAR_QUEUE


def dead_letter_queue_name() -> str:
    return f"{settings.NIGHTJAR_QUEUE}.dead"


def masked_url(url: str | None = None) -> str:
    """RABBITMQ_URL with its password hidden, for logs and messages."""
    parts = urlsplit(url or settings.RABBITMQ_URL)
    if parts.password is None:
        return parts.geturl()
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def parameters() -> pika.URLParameters:
    url = settings.RABBITMQ_URL
    given = parse_qs(urlsplit(url).query)
    params = pika.URLParameters(url)
    for name, value in URL_DEFAULTS.items():
        if name not in given:
            setattr(params, name, value)
    return params


@contextlib.contextmanager
def translated_errors(action: str) -> Iterator[None]:
    """Turn pika's exceptions into BrokerError with a sentence a person understands."""
    try:
        yield
    except pika.exceptions.UnroutableError:
        raise BrokerError(f"RabbitMQ could not route the message ({action}): is the queue there?") from None
    except pika.exceptions.NackError:
        raise BrokerError(f"RabbitMQ refused the message ({action}).") from None
    except (pika.exceptions.AMQPError, OSError) as error:
        detail = str(error) or type(error).__name__
        raise BrokerError(f"RabbitMQ at {masked_url()} is unavailable ({action}): {detail}") from None


def declare(channel):
    """Declare both queues; returns the (work, dead) declare-ok methods, which carry their counts."""
    queue = queue_name()
    dead = channel.queue_declare(dead_letter_queue_name(), durable=True, arguments={"x-queue-type": "quorum"})
    work = channel.queue_declare(
        queue,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": settings.NIGHTJAR_DELIVERY_LIMIT,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead_letter_queue_name(),
        },
    )
    return work.method, dead.method


class Publisher:
    """One reused, confirmed connection per process (web worker or command)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection = None
        self._channel = None
        self._declared: set[str] = set()
        self._failed_until = 0.0
        self._backoff = PUBLISH_BACKOFF_START

    def publish(self, body: bytes, *, message_id: str) -> None:
        """Publish persistently and wait for the confirm. Raises BrokerError."""
        with self._lock:
            if time.monotonic() < self._failed_until:
                raise BrokerError("RabbitMQ was unavailable moments ago; this publish is left for reconcile.")
            # A reused connection may have died while idle: one reconnect, then
            # give up. A fresh connection that fails gets no second try.
            attempts = 2 if self._connection is not None else 1
            for attempt in range(1, attempts + 1):
                try:
                    with translated_errors("publish"):
                        channel = self._open()
                        channel.basic_publish(
                            exchange="",
                            routing_key=queue_name(),
                            body=body,
                            properties=pika.BasicProperties(
                                delivery_mode=pika.DeliveryMode.Persistent,
                                content_type="application/json",
                                message_id=message_id,
                            ),
                            mandatory=True,
                        )
                    self._backoff = PUBLISH_BACKOFF_START
                    return
                except BrokerError:
                    self.close()
                    if attempt == attempts:
                        self._failed_until = time.monotonic() + self._backoff
                        self._backoff = min(self._backoff * 2, PUBLISH_BACKOFF_MAX)
                        raise

    def _open(self):
        if self._connection is None or self._connection.is_closed:
            self._connection = pika.BlockingConnection(parameters())
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
            self._declared = set()
        else:
            # Services heartbeats and notices a connection the broker closed.
            self._connection.process_data_events(0)
        if queue_name() not in self._declared:
            declare(self._channel)
            self._declared.add(queue_name())
        return self._channel

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):
                connection.close()

    def reset(self) -> None:
        """Forget the connection and any backoff (tests, and after a fork)."""
        with self._lock:
            self.close()
            self._failed_until = 0.0
            self._backoff = PUBLISH_BACKOFF_START


publisher = Publisher()


def publish(body: bytes, *, message_id: str) -> None:
    publisher.publish(body, message_id=message_id)


@dataclass(frozen=True)
class Delivery:
    """One publication as RabbitMQ handed it over: for ack and diagnosis only.
    The registration ID inside the body is the identity, never these fields."""

    body: bytes
    tag: int
    redelivered: bool
    message_id: str


class Consumer:
    """The worker's side: a connection, a channel, the topology, and basic
    get/consume/ack. Every method raises BrokerError, never a pika exception."""

    def __init__(self, *, prefetch: int = 1) -> None:
        with translated_errors("connect"):
            self._connection = pika.BlockingConnection(parameters())
            self._channel = self._connection.channel()
            declare(self._channel)
            self._channel.basic_qos(prefetch_count=prefetch)

    @staticmethod
    def _delivery(method, properties, body) -> Delivery:
        return Delivery(
            body=body,
            tag=method.delivery_tag,
            redelivered=bool(method.redelivered),
            message_id=(properties.message_id or "") if properties else "",
        )

    def get(self) -> Delivery | None:
        """Take one ready delivery (unacknowledged until ack), or None."""
        with translated_errors("get"):
            method, properties, body = self._channel.basic_get(queue_name(), auto_ack=False)
        return None if method is None else self._delivery(method, properties, body)

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        """Yield deliveries as they arrive; None after idle_seconds without one."""
        with translated_errors("consume"):
            for method, properties, body in self._channel.consume(queue_name(), inactivity_timeout=idle_seconds):
                yield None if method is None else self._delivery(method, properties, body)

    def stop_consuming(self) -> None:
        # Unacked prefetched deliveries go straight back to the queue.
        with translated_errors("cancel"):
            self._channel.cancel()

    def ack(self, tag: int, *, multiple: bool = False, flush: bool = True) -> None:
        """Ack after the commit. flush=False queues the frame for the next
        socket write (the consume loop writes it within one round trip) instead
        of waiting for it to leave now: in service mode that saves a poll per
        delivery. A queued ack lost in a crash only means a redelivery, which
        the completion key makes harmless."""
        with translated_errors("ack"):
            if flush:
                self._channel.basic_ack(delivery_tag=tag, multiple=multiple)
            else:
                # pika's blocking channel always flushes; its underlying channel does not.
                self._channel._impl.basic_ack(delivery_tag=tag, multiple=multiple)

    def requeue(self, tag: int) -> None:
        """Give a delivery back now (counts towards the delivery limit)."""
        with translated_errors("requeue"):
            self._channel.basic_nack(delivery_tag=tag, requeue=True)

    def keepalive(self, seconds: float = 0) -> None:
        """Let pika answer heartbeats for up to `seconds` (used while paused)."""
        with translated_errors("heartbeat"):
            self._connection.process_data_events(time_limit=seconds)

    def close(self) -> None:
        # Closing without ack is what hands unacked deliveries back to RabbitMQ.
        with contextlib.suppress(Exception):
            if self._connection.is_open:
                self._connection.close()


@contextlib.contextmanager
def short_channel(action: str):
    """A channel on a connection of its own, closed afterwards (status, admin, tools)."""
    with translated_errors(action):
        connection = pika.BlockingConnection(parameters())
        try:
            yield connection.channel()
        finally:
            if connection.is_open:
                connection.close()


def queue_counts() -> dict[str, int]:
    """Ready messages in the work and dead-letter queues, and consumers attached."""
    with short_channel("queue status") as channel:
        work, dead = declare(channel)
    counts = {"ready": work.message_count, "consumers": work.consumer_count, "dead": dead.message_count}
    counts["unacked"], counts["unacked_error"] = unacked_count()
    return counts


def unacked_count() -> tuple[int | None, str]:
    """Unacknowledged deliveries, from the management API (AMQP cannot tell).
    Returns (count, "") or (None, why not)."""
    if not settings.RABBITMQ_MANAGEMENT_URL:
        return None, "RABBITMQ_MANAGEMENT_URL is not set"
    amqp = urlsplit(settings.RABBITMQ_URL)
    vhost = unquote(amqp.path[1:]) if len(amqp.path) > 1 else "/"
    url = urljoin(
        settings.RABBITMQ_MANAGEMENT_URL, f"api/queues/{quote(vhost, safe='')}/{quote(queue_name(), safe='')}"
    )
    user, password = unquote(amqp.username or "guest"), unquote(amqp.password or "guest")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        with urlopen(Request(url, headers={"Authorization": f"Basic {token}"}), timeout=2) as response:
            data = json.load(response)
    except (OSError, ValueError) as error:
        return None, f"management API unreachable: {error}"
    return int(data.get("messages_unacknowledged", 0)), ""


def delete_queues() -> None:
    """Delete the work and dead-letter queues (verify_handler's throwaway ones)."""
    with short_channel("delete queues") as channel:
        channel.queue_delete(queue_name())
        channel.queue_delete(dead_letter_queue_name())


def ping() -> None:
    """Open and close a connection: raises BrokerError if RabbitMQ is not there."""
    with short_channel("health check"):
        pass
