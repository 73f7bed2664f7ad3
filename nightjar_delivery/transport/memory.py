"""The in-memory transport, for the fast test tier only (NIGHTJAR_BROKER_URL
memory://). Queues are lists in this process: nothing survives the process,
nothing is shared with another one, nothing is durable. It exists so that the
forms, views, admin and the worker loop can be tested in-process without a
broker; no guarantee is proven on it alone — every delivery behaviour a fast
test shows on it is proven again on RabbitMQ and Redis in the broker tier.

It keeps the transport's written behaviour: a delivery stays unacked until
ack (ack after commit), requeue puts it back at the head with its delivery
count raised, past NIGHTJAR_DELIVERY_LIMIT returns it moves to `<queue>.dead`,
a closed consumer hands back what it held.
"""

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

from nightjar_delivery import conf
from nightjar_delivery.transport import Backoff, BrokerError, Delivery, queue_name

_lock = threading.Condition()
_tags = itertools.count(1)


class _Queue:
    def __init__(self) -> None:
        self.ready: collections.deque[Delivery] = collections.deque()
        self.dead: collections.deque[Delivery] = collections.deque()
        self.unacked: dict[int | str, tuple[Delivery, Consumer]] = {}  # by tag
        self.consumers = 0


_queues: dict[str, _Queue] = collections.defaultdict(_Queue)
# A test makes this raise to play a broker that is down (tests/conftest.py).
down = False


def _check(action: str) -> None:
    if down:
        raise BrokerError(f"The in-memory broker is down ({action}).")


def _queue(name: str | None = None) -> _Queue:
    """One entry per work queue; its dead letters (`<queue>.dead`) are its .dead."""
    return _queues[name or queue_name()]


def _put(body: bytes, message_id: str, *, queue: str, dead: bool = False, attempts: int = 0) -> None:
    delivery = Delivery(body=body, tag=0, redelivered=False, message_id=message_id, attempts=attempts)
    target = _queue(queue)
    (target.dead if dead else target.ready).append(delivery)
    _lock.notify_all()


class Publisher:
    def __init__(self) -> None:
        self._backoff = Backoff()

    def publish(self, body: bytes, *, message_id: str, queue: str) -> None:
        self._backoff.check()
        with _lock:
            try:
                _check("publish")
            except BrokerError:
                self._backoff.failed()
                raise
            _put(body, message_id, queue=queue)
        self._backoff.succeeded()

    def reset(self) -> None:
        self._backoff = Backoff()


publisher = Publisher()


class Consumer:
    """The worker's side; deliveries handed out stay unacked until ack()."""

    node = "memory"

    def __init__(self, *, prefetch: int = 1, queue: str) -> None:
        with _lock:
            _check("connect")
            self.prefetch = prefetch
            self.queue = queue
            self.lost: list[str] = []  # nothing is ever trimmed here
            self._queue = _queue(queue)
            self._queue.consumers += 1
            self._closed = False

    def _take(self, *, dead: bool = False) -> Delivery | None:
        _check("get")
        source = self._queue.dead if dead else self._queue.ready
        while source:
            delivery = source.popleft()
            if not dead and delivery.attempts > conf.NIGHTJAR_DELIVERY_LIMIT:
                self._queue.dead.append(delivery)
                continue
            handed = delivery._replace(tag=next(_tags))
            self._queue.unacked[handed.tag] = (handed._replace(tag=0), self)
            return handed
        return None

    def get(self, *, dead: bool = False) -> Delivery | None:
        with _lock:
            return self._take(dead=dead)

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        while True:
            with _lock:
                delivery = self._take()
                if delivery is None:
                    _lock.wait(idle_seconds)
                    delivery = self._take()
            yield delivery

    def waiting(self) -> list[bytes]:
        return []

    def ack(self, tag: int | str, *, multiple: bool = False, flush: bool = True) -> None:
        self.ack_many([tag], flush=flush)

    def ack_many(self, tags: list[int | str], *, flush: bool = True, multiple: bool = True) -> None:
        with _lock:
            _check("ack")
            for tag in tags:
                entry = self._queue.unacked.pop(tag, None)
                if entry is None:
                    raise BrokerError(f"The in-memory broker holds no unacked delivery {tag}.")

    def flush_acks(self) -> None:
        pass

    def _give_back(self, tags: list[int | str], *, counted: bool) -> None:
        for tag in reversed(tags):
            delivery, _ = self._queue.unacked.pop(tag)
            attempts = delivery.attempts + 1 if counted else delivery.attempts
            self._queue.ready.appendleft(delivery._replace(redelivered=True, attempts=attempts))
        _lock.notify_all()

    def requeue(self, tag: int | str) -> None:
        """Hand back a delivery whose handling failed; it counts towards the delivery limit."""
        with _lock:
            _check("requeue")
            self._give_back([tag], counted=True)

    def hand_back_all(self) -> None:
        with _lock:
            mine = [tag for tag, (_, owner) in self._queue.unacked.items() if owner is self]
            self._give_back(mine, counted=False)

    def stop_consuming(self) -> None:
        self.hand_back_all()

    def keepalive(self, seconds: float = 0) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._closed:
            return
        self.hand_back_all()
        with _lock:
            self._closed = True
            self._queue.consumers -= 1


def queue_counts(queue: str) -> dict[str, Any]:
    with _lock:
        _check("queue status")
        counted = _queue(queue)
        return {
            "ready": len(counted.ready),
            "unacked": len(counted.unacked),
            "unacked_error": "",
            "consumers": counted.consumers,
            "dead": len(counted.dead),
        }


def ping() -> None:
    with _lock:
        _check("health check")


def purge_queues(queue: str | None = None) -> None:
    with _lock:
        _check("purge")
        emptied = _queue(queue)
        emptied.ready.clear()
        emptied.dead.clear()


def delete_queues(queue: str | None = None) -> None:
    with _lock:
        _queues.pop(queue or queue_name(), None)


def publish_raw(bodies: list[bytes], *, dead: bool = False, queue: str | None = None) -> None:
    with _lock:
        _check("publish")
        for body in bodies:
            _put(body, "", queue=queue or queue_name(), dead=dead)


def forget() -> None:
    """Drop every queue (between tests)."""
    global down
    with _lock:
        _queues.clear()
        down = False
