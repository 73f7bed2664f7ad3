"""The worker's side of a transport, written down: what every transport's
Consumer (transport.Consumer() returns the broker URL's) promises. Checked
against each real broker by tests/test_transport_conformance.py, which
bin/test runs on RabbitMQ and again on Redis Streams."""

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from nightjar_delivery.transport import Delivery


@runtime_checkable
class Consumer(Protocol):
    """Every method raises BrokerError, never a client library's exception."""

    node: str  # which broker node it is connected to, for people
    # Entries the broker dropped before they were handled (Redis: trimmed
    # while pending; RabbitMQ: always empty); the worker records and empties it.
    lost: list[str]

    def get(self, *, dead: bool = False) -> Delivery | None:
        """One ready delivery, unacknowledged until ack (from the dead-letter
        queue with dead=True), or None when none is ready."""

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        """Deliveries as they come; None after idle_seconds without one."""

    def waiting(self) -> list[bytes]:
        """Bodies already received and not yet handed out (read-ahead hints)."""

    def ack(self, tag: int | str, *, multiple: bool = False, flush: bool = True) -> None:
        """The broker may forget this delivery; flush=False may defer the send."""

    def ack_many(self, tags: list[int | str], *, flush: bool = True) -> None:
        """Ack every one of these deliveries (one frame or round trip where the broker allows)."""

    def requeue(self, tag: int | str) -> None:
        """Hand the delivery back unacknowledged: it comes again, redelivered."""

    def stop_consuming(self) -> None:
        """Leave consume() after the delivery at hand."""

    def keepalive(self, seconds: float = 0) -> None:
        """Keep the connection alive for about this long (heartbeats) while waiting."""

    def close(self) -> None:
        """Send deferred acks and close; what is unacknowledged goes back."""
