"""Receive, the broker's side of a worker: the consumer (connected, closed,
connected again by the loop), deliveries one at a time or in batches of up
to `batch` gathered within batch_ms, the acks and returns the settler asks
for, and entries the broker dropped before they were received."""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from nightjar_delivery import recording, transport
from nightjar_delivery.channel import Channel
from nightjar_delivery.transport.protocol import Consumer


class Receiver:
    """Owns the consumer and how deliveries come (prefetch, batch,
    batch_seconds). Others ask it for deliveries, acks and returns; none
    touches the consumer."""

    def __init__(
        self,
        *,
        channel: Channel,
        name: str,
        prefetch: int,
        batch: int | None,
        batch_ms: float,
        say: Callable[[str], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.channel = channel
        self.name = name
        self.prefetch = prefetch
        self.batch = batch
        self.batch_seconds = batch_ms / 1000
        self.say = say
        self.stopping = stopping  # the loop's shutdown flag, asked while a batch waits
        self.consumer: Consumer | None = None  # between connect() and close()

    def connect(self) -> None:
        self.consumer = transport.Consumer(prefetch=self.prefetch, queue=self.channel.queue)

    @property
    def connected(self) -> Consumer:
        """The consumer, which every call below needs: one between connect() and close()."""
        consumer = self.consumer
        assert consumer is not None, "the receiver is not connected"
        return consumer

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def node(self) -> str:
        """The broker node the consumer is connected to (the serving line names it)."""
        return self.connected.node

    def take(self) -> list[transport.Delivery]:
        """One ready delivery as a batch of one (a batch in batch mode); [] when nothing is ready."""
        return self.collect_batch() if self.batch else self.one(self.connected.get())

    @staticmethod
    def one(delivery: transport.Delivery | None) -> list[transport.Delivery]:
        """A delivery as a batch of one (nothing as an empty one)."""
        return [delivery] if delivery is not None else []

    def deliveries(self) -> Iterator[list[transport.Delivery]]:
        """Yield lists: of one delivery, or a batch in batch mode; an empty
        one now and then when idle, so the loop can look at its flags."""
        if not self.batch:
            for delivery in self.connected.consume(idle_seconds=0.5):
                yield self.one(delivery)
            return
        while True:
            yield self.collect_batch(first_wait=0.5)

    def collect_batch(self, *, first_wait: float = 1.0) -> list[transport.Delivery]:
        """Up to `batch` deliveries, or fewer when batch_ms pass without one.
        The first one may take up to first_wait (the consumer is just starting)."""
        assert self.batch, "batch mode only"
        deliveries: list[transport.Delivery] = []
        idle = 0.0
        for delivery in self.connected.consume(idle_seconds=self.batch_seconds):
            if delivery is None:
                idle += self.batch_seconds
                if deliveries or idle >= first_wait or self.stopping():
                    break
                continue
            deliveries.append(delivery)
            if len(deliveries) >= self.batch:
                break
        return deliveries

    def waiting(self) -> list[bytes]:
        """Bodies received and not yet taken, up to the prefetch (the screen reads their rows ahead)."""
        return self.connected.waiting()[: self.prefetch]

    def ack(self, tag: int | str, *, flush: bool = True) -> None:
        self.connected.ack(tag, flush=flush)

    def ack_many(self, tags: list[int | str], *, flush: bool) -> None:
        self.connected.ack_many(tags, flush=flush)

    def requeue(self, tag: int | str) -> None:
        """Hand a delivery back unacked (a failure: counted by the broker, whatever its version)."""
        self.connected.requeue(tag)

    def ack_within(self, deliveries: list[transport.Delivery], *, using: str) -> AbstractContextManager[object]:
        """Around the handler: on the database transport the deliveries' ack
        joins the handler's commit on `using` (transport.ack_within); elsewhere nothing."""
        return transport.ack_within(self.consumer, deliveries, using=using)

    def acked_within(self, delivery: transport.Delivery | None) -> bool:
        """Whether ack_within's commit removed this delivery (None: any, a batch's)."""
        return transport.acked_within(self.consumer, delivery)

    def keepalive(self, seconds: float) -> None:
        self.connected.keepalive(seconds)

    def can_keep_alive(self) -> bool:
        return self.consumer is not None

    def stop(self) -> None:
        self.connected.stop_consuming()

    def record_lost(self) -> None:
        """Entries the broker dropped before they were handled: one line for
        the terminal, one record for staff; reconcile republishes them."""
        while self.connected.lost:
            entry = self.connected.lost.pop(0)
            recording.record_lost_entry(entry=entry, worker=self.name, channel=self.channel)
            self.say(f"{transport.name()} entry {entry} was trimmed before it was handled; reconcile republishes it.")
