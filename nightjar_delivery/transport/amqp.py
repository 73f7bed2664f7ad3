"""The RabbitMQ transport: everything that speaks AMQP. pika is imported here
and nowhere else (the benchmark's raw ceiling aside).

Topology (declared idempotently by publisher and worker alike):
- `<queue>` (each channel's own): a durable
  quorum queue. Its delivery limit makes RabbitMQ dead-letter a message that
  keeps failing instead of looping forever.
- `<queue>.dead`: where those messages end up, for a person to look at.
Messages go through the default exchange, persistent, with publisher confirms
and mandatory=True, so "published" means "RabbitMQ has it on disk in a queue".
"""

import atexit
import base64
import contextlib
import json
import logging
import os
import queue
import random
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar
from urllib.error import HTTPError
from urllib.parse import parse_qs, quote, unquote, urljoin, urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

import pika
import pika.exceptions

from nightjar_delivery import conf
from nightjar_delivery.transport import (
    Backoff,
    BrokerError,
    Delivery,
    background_thread,
    dead_letter_queue_name,
    masked_url,
    queue_name,
)

logger = logging.getLogger(__name__)

# Short defaults so a dead, frozen or blocked broker is noticed; each can
# still be set in RABBITMQ_URL's query string (?socket_timeout=5). They bound
# the background work; what a caller waits is bounded by
# NIGHTJAR_BROKER_TIMEOUT (see Publisher and within()). The heartbeat is what
# notices a broker that froze, or a link that was cut, under an open
# connection (it fails between one and two intervals later).
URL_DEFAULTS = {
    "connection_attempts": 1,
    "socket_timeout": 2.0,
    "stack_timeout": 5.0,
    "blocked_connection_timeout": 5.0,
    "heartbeat": 10,
}


def urls() -> list[str]:
    """The node URLs: NIGHTJAR_BROKER_URL may list a cluster's nodes separated
    by `;` (Celery's convention), e.g. amqp://u:p@h1/%2F;amqp://u:p@h2/%2F."""
    return [url.strip() for url in conf.NIGHTJAR_BROKER_URL.split(";") if url.strip()]


def parameters() -> list[pika.URLParameters]:
    """Connection parameters for every node, in a shuffled order: each client
    picks a node at random, and moves on to the next when it is refused or
    silent (connect). Every element gets one attempt: pika, given the whole
    list, would take connection_attempts and retry_delay from the last one."""
    nodes = []
    for url in urls():
        given = parse_qs(urlsplit(url).query)
        params = pika.URLParameters(url)
        for name, value in URL_DEFAULTS.items():
            if name not in given:
                setattr(params, name, value)
        # Shown by `rabbitmqctl list_connections client_properties` and the management UI.
        params.client_properties = {"connection_name": f"nightjar {socket.gethostname()}:{os.getpid()}"}
        nodes.append(params)
    random.shuffle(nodes)
    return nodes


def connect() -> tuple[pika.BlockingConnection, str]:
    """A connection to the first node of the shuffled list that takes it, and
    that node as host:port (the worker says which node it consumes from).
    One attempt per node, as pika makes with the whole list; raises pika's
    error of the last node when none does."""
    *others, last = parameters()
    for params in others:
        try:
            return pika.BlockingConnection(params), f"{params.host}:{params.port}"
        except pika.exceptions.AMQPConnectionError:
            continue  # the next node
    return pika.BlockingConnection(last), f"{last.host}:{last.port}"


class Refused(BrokerError):
    """RabbitMQ answered and nacked the publish (a quorum queue electing a new
    leader, an overflow policy): the broker is there, so no backoff."""


# Between two tries of a refused publish, while the caller's deadline allows.
REFUSED_RETRY_PAUSE = 0.1


def _is_broker_failure(error: Exception) -> bool:
    """pika's own exceptions (several families, some not AMQPError, such as
    AMQPConnectorStackTimeout) and socket errors: everything that means the
    broker or the link failed, not a bug of ours."""
    return isinstance(error, OSError | EOFError) or type(error).__module__.startswith("pika.")


@contextlib.contextmanager
def translated_errors(action: str) -> Iterator[None]:
    """Turn every pika and socket exception into BrokerError with a sentence a person understands."""
    try:
        yield
    except BrokerError:
        raise
    except pika.exceptions.UnroutableError:
        raise BrokerError(f"RabbitMQ could not route the message ({action}): is the queue there?") from None
    except pika.exceptions.NackError:
        raise Refused(f"RabbitMQ refused the message ({action}).") from None
    except Exception as error:
        if not _is_broker_failure(error):
            raise
        detail = str(error) or type(error).__name__
        raise BrokerError(f"RabbitMQ at {masked_url()} is unavailable ({action}): {detail}") from None


_P = ParamSpec("_P")
_T = TypeVar("_T")


def within(seconds: float, action: str, function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run function in a thread of its own and return its result, or raise
    BrokerError once `seconds` pass. pika's blocking calls have no deadline of
    their own (a frozen broker or a queue without quorum keeps them waiting),
    so a caller that must answer in time waits here instead; the thread is
    left to finish or fail on its own."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        background_thread()
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # handed to the caller, whatever it is
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, name=f"nightjar-broker-{action}", daemon=True).start()
    if not done.wait(seconds):
        raise BrokerError(f"RabbitMQ at {masked_url()} did not answer within {seconds:g} s ({action}).")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # set: run() finished without an error


def declare(channel: Any, queue: str | None = None) -> tuple[Any, Any]:
    """Declare a queue and its dead-letter queue (queue None: the default channel's);
    returns the (work, dead) declare-ok methods, which carry their counts."""
    queue = queue or queue_name()
    dead = channel.queue_declare(dead_letter_queue_name(queue), durable=True, arguments={"x-queue-type": "quorum"})
    work = channel.queue_declare(
        queue,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": conf.NIGHTJAR_DELIVERY_LIMIT,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead_letter_queue_name(queue),
        },
    )
    return work.method, dead.method


class _Publication:
    """One publish handed to the publisher thread, and its outcome."""

    def __init__(self, body: bytes, message_id: str, deadline: float | None, queue: str, on_failure=None) -> None:
        self.body = body
        self.queue = queue
        self.message_id = message_id
        # time.monotonic() when the caller stops waiting; None (nobody waits: publish_soon):
        # NIGHTJAR_BROKER_TIMEOUT from when the thread takes it.
        self.deadline = deadline
        self.on_failure = on_failure  # publish_soon's: told of the error, on the publisher thread
        self.skipped = False  # not tried: the broker failed moments ago (Backoff)
        self.refusals = 0
        self.error: BrokerError | None = None
        self.done = threading.Event()


class _PublisherThread(threading.Thread):
    """Owns one confirmed connection and publishes what it is handed, one at
    a time. Only this thread touches the connection (pika is not thread-safe)."""

    def __init__(self, on_finished: Callable[[_Publication], None], backoff: Backoff) -> None:
        super().__init__(name="nightjar-publisher", daemon=True)
        self.backoff = backoff  # the Publisher's: publish_soon's jobs skip a broker that failed moments ago
        self.jobs: queue.SimpleQueue[_Publication | None] = queue.SimpleQueue()
        self.on_finished = on_finished
        self.connection: pika.BlockingConnection | None = None
        self.channel: pika.adapters.blocking_connection.BlockingChannel | None = None
        self.declared: set[str] = set()
        # Set by RabbitMQ's connection.blocked (a memory or disk alarm): publishes
        # fail at once instead of waiting for blocked_connection_timeout.
        self.blocked = False
        self.busy_since: float | None = None  # time.monotonic() when the job under way was taken

    def run(self) -> None:
        background_thread()
        while (job := self.jobs.get()) is not None:
            if job.deadline is None:
                job.deadline = time.monotonic() + conf.NIGHTJAR_BROKER_TIMEOUT
            self.busy_since = time.monotonic()
            try:
                if job.on_failure is not None:
                    # Nobody waits for it: a broker that failed moments ago is not tried again for each
                    # of the publishes queued behind (as a caller's publish is not: Backoff).
                    job.skipped = True
                    self.backoff.check()
                    job.skipped = False
                self.publish(job)
            except BrokerError as error:
                job.error = error
            except Exception as error:  # never let the thread die: the caller must hear back
                logger.exception("The publisher thread failed")
                job.error = BrokerError(f"Publishing failed unexpectedly: {error}")
            finally:
                self.busy_since = None
                self.on_finished(job)
                job.done.set()
        self.close()

    def publish(self, job: _Publication) -> None:
        # A reused connection may have died while idle: one reconnect, then
        # give up. A fresh connection that fails gets no second try. A refusal
        # (a nack: during a quorum leader election) is tried again, on a fresh
        # connection (maybe another node), as long as the caller waits.
        attempts = 2 if self.connection is not None else 1
        attempt = 0
        while True:
            attempt += 1
            try:
                with translated_errors("publish"):
                    channel = self.open(job.queue)
                    if self.blocked:
                        raise BrokerError("RabbitMQ is blocking publishers (a resource alarm); left for reconcile.")
                    channel.basic_publish(
                        exchange="",
                        routing_key=job.queue,
                        body=job.body,
                        properties=pika.BasicProperties(
                            delivery_mode=pika.DeliveryMode.Persistent,
                            content_type="application/json",
                            message_id=job.message_id,
                        ),
                        mandatory=True,
                    )
                return
            except Refused:
                self.close()
                job.refusals += 1
                pause = min(REFUSED_RETRY_PAUSE * job.refusals, 1.0)
                assert job.deadline is not None  # run() set it when it took the job
                if time.monotonic() + pause >= job.deadline:
                    raise
                logger.info("RabbitMQ refused a publish (%d time(s)); trying again within its deadline", job.refusals)
                time.sleep(pause)
                attempt = 0  # the broker answered: the next connection is a fresh start
                attempts = 1
            except BrokerError:
                # Blocked: keep the connection, it will hear connection.unblocked.
                # Anything else gets a fresh connection next time.
                if not self.blocked:
                    self.close()
                if attempt == attempts or self.blocked:
                    raise

    def open(self, queue: str) -> Any:
        if self.connection is None or self.connection.is_closed:
            self.connection, _ = connect()
            self.blocked = False
            self.connection.add_on_connection_blocked_callback(lambda *_: setattr(self, "blocked", True))
            self.connection.add_on_connection_unblocked_callback(lambda *_: setattr(self, "blocked", False))
            self.channel = self.connection.channel()
            self.channel.confirm_delivery()
            self.declared = set()
        else:
            # Services heartbeats, notices a connection the broker closed, and
            # runs the blocked/unblocked callbacks.
            self.connection.process_data_events(0)
        if queue not in self.declared and not self.blocked:
            declare(self.channel, queue)
            self.declared.add(queue)
        return self.channel

    def close(self) -> None:
        connection, self.connection, self.channel = self.connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):
                connection.close()


class Publisher:
    """One reused, confirmed connection per process (web worker or command),
    driven by a thread of its own so that a caller waits at most
    NIGHTJAR_BROKER_TIMEOUT, whatever the broker does: down, frozen, blocked by
    an alarm, or a queue without quorum. A publish the deadline gave up on may
    still be confirmed later; the worker makes such a repeat harmless."""

    # publish_soon: publishes handed to the thread and not yet done, at most this many; past
    # it the caller waits for room (as long as a publish would wait for its confirm), so a
    # burst of enqueues slows down to the broker's pace instead of leaving tasks to reconcile.
    MAX_WAITING = 1000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: _PublisherThread | None = None
        self._thread_lock = threading.Lock()  # starting the thread (publish holds _lock while it waits)
        self._current: _Publication | None = None
        self._backoff = Backoff()
        self._waiting = 0  # publish_soon's jobs not done yet
        self._room = threading.Condition()  # guards _waiting; notified as jobs finish
        self._flush_at_exit = False

    def publish(self, body: bytes, *, message_id: str, queue: str) -> None:
        """Publish persistently to queue and wait for the confirm. Raises BrokerError."""
        timeout = conf.NIGHTJAR_BROKER_TIMEOUT
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=timeout):
            raise BrokerError("Another publish is still waiting for RabbitMQ; this one is left for reconcile.")
        try:
            self._backoff.check()
            if self._current is not None:
                # The thread is still waiting on a publish an earlier caller gave up on.
                raise BrokerError("RabbitMQ has not answered an earlier publish yet; this one is left for reconcile.")
            job = self._current = _Publication(body, message_id, deadline, queue)
            self._started_thread().jobs.put(job)
            if not job.done.wait(max(deadline - time.monotonic(), 0)):
                if not job.refusals:  # refused and tried again until now: the broker is there
                    self._backoff.failed()
                raise BrokerError(
                    f"RabbitMQ at {masked_url()} did not confirm within {timeout:g} s; left for reconcile."
                )
            if job.error is not None:
                # Only a broker that cannot be reached makes the next publishes skip it.
                if not isinstance(job.error, Refused):
                    self._backoff.failed()
                raise job.error
            self._backoff.succeeded()
        finally:
            self._lock.release()

    def publish_soon(self, body: bytes, *, message_id: str, queue: str, on_failure) -> None:
        """Hand the publish to the thread and return without waiting for the
        confirm: for an intent already safe in its row, which reconcile
        publishes if this publish is lost, the confirm buys a shorter wait
        before the first run, not safety (issue 51). on_failure(BrokerError)
        is called on the publisher thread, or here when the publish is left
        for reconcile at once (the broker failed moments ago, the thread is
        stuck on a publish, or MAX_WAITING still wait after the broker timeout)."""
        timeout = conf.NIGHTJAR_BROKER_TIMEOUT
        thread = self._started_thread()
        if thread.connection is None or thread.connection.is_closed:
            # Not connected yet: this one connects and publishes on the caller's time, as publish()
            # does. A process that enqueues and exits at once (`manage.py shell -c`) would otherwise
            # connect at its exit, where Python 3.12 refuses pika the thread its name lookup starts
            # ("can't create new thread at interpreter shutdown") and the task waits for reconcile.
            try:
                self.publish(body, message_id=message_id, queue=queue)
            except BrokerError as error:
                on_failure(error)
            return
        try:
            self._backoff.check()
            busy_since = thread.busy_since
            if busy_since is not None and time.monotonic() - busy_since > timeout:
                raise BrokerError("RabbitMQ has not answered an earlier publish yet; this one is left for reconcile.")
            with self._room:
                if not self._room.wait_for(lambda: self._waiting < self.MAX_WAITING, timeout=timeout):
                    raise BrokerError(f"{self._waiting} publishes wait for RabbitMQ; this one is left for reconcile.")
                self._waiting += 1
        except BrokerError as error:
            on_failure(error)
            return
        if not self._flush_at_exit:
            self._flush_at_exit = True
            atexit.register(self._flush)
        thread.jobs.put(_Publication(body, message_id, None, queue, on_failure))

    def _flush(self) -> None:
        """At the process's exit: what was handed to the thread goes out
        while the thread makes progress (a command that enqueued many tasks
        leaves none to reconcile's period when the broker is up); given up
        when no publish has finished for three NIGHTJAR_BROKER_TIMEOUTs (the
        broker frozen: reconcile's, as a process killed at that moment would
        leave them). Three: a process's first publish connects, opens its
        confirmed channel and declares the queue before it publishes, each
        step within the timeout (a loaded machine took longer than one)."""
        patience = 3 * conf.NIGHTJAR_BROKER_TIMEOUT
        with self._room:
            while self._waiting > 0:
                before = self._waiting

                def progressed(before: int = before) -> bool:
                    return self._waiting < before

                self._room.wait_for(progressed, timeout=patience)
                if self._waiting >= before:
                    return

    def _started_thread(self) -> _PublisherThread:
        with self._thread_lock:
            if self._thread is None:
                self._thread = _PublisherThread(self._finished, self._backoff)
                self._thread.start()
            return self._thread

    def _finished(self, job: _Publication) -> None:
        if self._current is job:
            self._current = None
        if job.on_failure is None:
            return
        with self._room:
            self._waiting = max(0, self._waiting - 1)  # (a job of a thread before reset() counts no more)
            self._room.notify()
        if job.error is None:
            self._backoff.succeeded()
            return
        # As publish() does: only a broker that cannot be reached makes the next publishes skip it.
        if not isinstance(job.error, Refused) and not job.skipped:
            self._backoff.failed()
        try:
            job.on_failure(job.error)
        except Exception:
            logger.exception("Could not report a failed publish")

    def reset(self) -> None:
        """Forget the connection and any backoff (tests, and after a fork).
        A thread still stuck on the old connection ends when that does."""
        with self._lock, self._thread_lock:
            if self._thread is not None:
                self._thread.jobs.put(None)
            self._thread = None
            self._current = None
            self._backoff = Backoff()
            self._waiting = 0


publisher = Publisher()


class Consumer:
    """The worker's side: a connection, a channel, the topology, and basic
    get/consume/ack. Every method raises BrokerError, never a pika exception."""

    def __init__(self, *, prefetch: int = 1, queue: str) -> None:
        self.queue = queue
        with translated_errors("connect"):
            self._connection, self.node = connect()
            self._channel = self._connection.channel()
            declare(self._channel, queue)
            self._channel.basic_qos(prefetch_count=prefetch)
        # Deferred acks (flush=False): the highest tag acked but not yet sent,
        # and how many deliveries it covers. Sent as one multiple=True ack once
        # it covers half the prefetch, before anything is handed back, when
        # the consumer goes idle, and before the channel closes.
        self._prefetch = prefetch
        self.lost: list[str] = []  # RabbitMQ never loses a delivery it handed out unacked
        self._deferred_tag = 0
        self._deferred_count = 0
        # pika answers heartbeats only inside its own calls, and a task body
        # may run for minutes between two of them: RabbitMQ would close the
        # connection and redeliver what a live worker holds. A thread of ours
        # makes those calls in between; every use of the connection holds
        # this lock, so only one thread is ever inside pika (not thread-safe).
        self._lock = threading.RLock()
        self._stopped = threading.Event()
        heartbeat = getattr(getattr(self._connection, "_impl", None), "params", None)
        heartbeat = getattr(heartbeat, "heartbeat", None) or URL_DEFAULTS["heartbeat"]
        every = min(max(heartbeat / 4, 0.05), 1.0) if isinstance(heartbeat, int | float) else 1.0
        threading.Thread(
            target=_keep_answering, args=(weakref.ref(self), every), name="nightjar-heartbeats", daemon=True
        ).start()

    @staticmethod
    def _delivery(method: Any, properties: Any, body: bytes) -> Delivery:
        headers = (properties.headers if properties else None) or {}
        try:
            attempts = int(headers.get("x-delivery-count") or 0)
        except (TypeError, ValueError):
            attempts = 0  # a header set by some other client: diagnosis only
        if headers.get("x-first-death-reason") == "delivery_limit":
            # Dead-lettered for its limit: the count restarts at 0 in `.dead`.
            attempts = conf.NIGHTJAR_DELIVERY_LIMIT + 1
        message_id = (properties.message_id or "") if properties else ""
        return Delivery(
            body=body,
            tag=method.delivery_tag,
            redelivered=bool(method.redelivered),
            message_id=message_id.decode("utf-8", "replace") if isinstance(message_id, bytes) else message_id,
            attempts=attempts,
        )

    def get(self, *, dead: bool = False) -> Delivery | None:
        """Take one ready delivery (unacknowledged until ack), or None; from
        the dead-letter queue with dead=True."""
        queue = dead_letter_queue_name(self.queue) if dead else self.queue
        with translated_errors("get"), self._lock:
            method, properties, body = self._channel.basic_get(queue, auto_ack=False)
        return None if method is None else self._delivery(method, properties, body)

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        """Yield deliveries as they arrive; None after idle_seconds without one."""
        with translated_errors("consume"):
            events = self._channel.consume(self.queue, inactivity_timeout=idle_seconds)
            while True:
                with self._lock:  # (released while the worker handles what it yields)
                    event = next(events, None)
                    if event is None:
                        return
                    method, properties, body = event
                    if method is None:
                        self.flush_acks()
                if method is None:
                    yield None
                else:
                    yield self._delivery(method, properties, body)

    def waiting(self) -> list[bytes]:
        """The bodies of deliveries already received and not yet yielded by
        consume(), without taking them: a hint for looking their intents
        up at once. Reads pika's consumer buffer (BlockingChannel, pika 1.x);
        an empty list if that is not there."""
        with self._lock:
            generator = getattr(self._channel, "_queue_consumer_generator", None)
            events = list(getattr(generator, "pending_events", None) or ())
        return [body for body in (getattr(event, "body", None) for event in events) if body is not None]

    def stop_consuming(self) -> None:
        """Cancel the consumer and hand back its prefetch with one nack. Not
        pika's cancel(): it rejects each prefetched delivery, and RabbitMQ 4.3
        counts a reject as a failed delivery — every shutdown would count."""
        self.flush_acks()
        generator = getattr(self._channel, "_queue_consumer_generator", None)
        with translated_errors("cancel"), self._lock:
            if generator is None or not hasattr(generator, "consumer_tag"):
                self._channel.cancel()  # not the pika 1.x we know: its own way
                return
            self._channel.basic_cancel(generator.consumer_tag)
            self._channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
            self._channel._queue_consumer_generator = None

    def ack(self, tag: int, *, multiple: bool = False, flush: bool = True) -> None:
        """Ack after the commit. flush=False (service mode) defers it: one
        multiple=True ack then covers several deliveries, which saves a socket
        round per delivery. Deliveries are handled in order and anything handed
        back is nacked only after the deferred acks are sent, so a multiple
        ack never covers a delivery that was not done. A deferred ack lost in
        a crash only means a redelivery, which the completion key makes harmless."""
        self.ack_many([tag], flush=flush, multiple=multiple)

    def ack_many(self, tags: list[int], *, flush: bool = True, multiple: bool = True) -> None:
        """Ack a batch after its commit: one basic.ack with multiple=True."""
        tag = max(tags)
        if not flush:
            self._deferred_tag = max(self._deferred_tag, tag)
            self._deferred_count += len(tags)
            if self._deferred_count * 2 >= self._prefetch:
                self.flush_acks()
            return
        self.flush_acks()
        with translated_errors("ack"), self._lock:
            self._channel.basic_ack(delivery_tag=tag, multiple=multiple or len(tags) > 1)

    def flush_acks(self) -> None:
        """Send the deferred acks now, if any."""
        if self._deferred_tag:
            tag, self._deferred_tag, self._deferred_count = self._deferred_tag, 0, 0
            with translated_errors("ack"), self._lock:
                self._channel.basic_ack(delivery_tag=tag, multiple=True)

    def requeue(self, tag: int) -> None:
        """Give back a delivery whose handling failed, now: basic.reject, one
        tag, which every RabbitMQ version counts towards x-delivery-limit (4.3
        counts nothing else; a nack, above all a multiple one, not at all)."""
        self.flush_acks()  # first: a later multiple=True ack must not cover this one
        with translated_errors("requeue"), self._lock:
            self._channel.basic_reject(delivery_tag=tag, requeue=True)

    def hand_back_all(self) -> None:
        """Give back every delivery not acked, deliberately (shutdown, Ctrl+C,
        the prefetch): basic.nack of all of them, which RabbitMQ 4.3 does not
        count as a failure (3.10 and 4.0 count every return anyway)."""
        self.flush_acks()
        with translated_errors("hand back"), self._lock:
            self._channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)

    def keepalive(self, seconds: float = 0) -> None:
        """Let pika answer heartbeats for up to `seconds` (used while paused)."""
        self.flush_acks()
        with translated_errors("heartbeat"), self._lock:
            self._connection.process_data_events(time_limit=seconds)

    def answer_heartbeats(self) -> bool:
        """One turn of the heartbeat thread: let pika send and read what is
        due, unless the worker is inside pika itself (it answers then). False
        once there is nothing left to keep alive."""
        if self._stopped.is_set() or not self._connection.is_open:
            return False
        if self._lock.acquire(blocking=False):
            try:
                self._connection.process_data_events(time_limit=0)
            finally:
                self._lock.release()
        return True

    def close(self) -> None:
        self._stopped.set()
        # What is not acked goes back: nacked first, else by the close itself.
        with contextlib.suppress(Exception):
            if self._connection.is_open:
                self.hand_back_all()
        with contextlib.suppress(Exception), self._lock:
            if self._connection.is_open:
                self._connection.close()


def _keep_answering(consumer_ref, every: float) -> None:
    """The heartbeat thread of a Consumer (held weakly: a consumer nobody
    closed still goes away). A broken connection ends it quietly: the
    worker's next call finds it broken and reconnects."""
    background_thread()
    stopped = consumer_ref()._stopped
    while not stopped.wait(every):
        consumer = consumer_ref()
        try:
            if consumer is None or not consumer.answer_heartbeats():
                return
        except Exception:
            return
        finally:
            del consumer


@contextlib.contextmanager
def short_channel(action: str) -> Iterator[Any]:
    """A channel on a connection of its own, closed afterwards (status, admin, tools)."""
    with translated_errors(action):
        connection, _ = connect()
        try:
            yield connection.channel()
        finally:
            if connection.is_open:
                connection.close()


def queue_counts(queue: str) -> dict[str, Any]:
    """Ready messages in the queue and its dead-letter queue, and consumers
    attached, as they are now (AMQP's declare-ok); unacknowledged deliveries
    as `unacknowledged()` can tell them; waits at most NIGHTJAR_BROKER_TIMEOUT
    (plus the management API's). From the management API, on a cluster: the
    quorum queue's leader and which of its members are online."""

    def count() -> tuple[Any, Any]:
        with short_channel("queue status") as channel:
            return declare(channel, queue)

    work, dead = within(conf.NIGHTJAR_BROKER_TIMEOUT, "queue status", count)
    counts = {"ready": work.message_count, "consumers": work.consumer_count, "dead": dead.message_count}
    info, error = management_queue_info(queue)
    counts["unacked"], counts["unacked_error"], counts["unacked_lags"] = unacknowledged(counts, info, error)
    if info is not None and info.get("members"):
        counts["leader"] = info.get("leader", "")
        counts["members"] = list(info["members"])
        counts["online"] = list(info.get("online", []))
    return counts


def unacknowledged(now: dict[str, Any], info: dict[str, Any] | None, error: str) -> tuple[int | None, str, bool]:
    """(count or None, why not, whether it may lag). Only the management API
    counts unacknowledged deliveries, from statistics a quorum queue reports
    every few seconds: right after a Ctrl+C they still count the delivery
    the gone worker held (measured: ~5 s on the lab's node). So, from what
    is true now: with no consumer attached, none is held — a quorum queue
    holds a delivery for a consumer (basic.get's one included, until it is
    settled) and returns it the moment that channel closes. Otherwise the
    statistics' figure if their ready and consumer counts are still those of
    now, flagged as possibly lagging; else unknown until they catch up."""
    if now["consumers"] == 0:
        return 0, "", False
    if info is None:
        return None, error, False
    if (info.get("messages_ready"), info.get("consumers")) != (now["ready"], now["consumers"]):
        return None, "RabbitMQ's statistics are a few seconds behind; ask again", False
    return int(info.get("messages_unacknowledged", 0)), "", True


class _NoRedirects(HTTPRedirectHandler):
    """A redirect from the management API is an error: following it would
    send the credentials' Authorization header to wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise HTTPError(req.full_url, code, f"refused a redirect to {newurl}", headers, fp)


_MANAGEMENT_OPENER = build_opener(_NoRedirects)


def management_queue_info(queue: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """The work queue (None: the default channel's) as the management API reports it (AMQP cannot tell how
    many deliveries are unacknowledged, nor where the replicas are). Tries
    each URL of RABBITMQ_MANAGEMENT_URL (`;`-separated on a cluster) within
    NIGHTJAR_BROKER_TIMEOUT each. Returns (data, "") or (None, why not)."""
    if not conf.RABBITMQ_MANAGEMENT_URL:
        return None, "RABBITMQ_MANAGEMENT_URL is not set"
    amqp = urlsplit(urls()[0])
    vhost = unquote(amqp.path[1:]) if len(amqp.path) > 1 else "/"
    path = f"api/queues/{quote(vhost, safe='')}/{quote(queue or queue_name(), safe='')}"
    # Management credentials of their own when given (a monitoring user), else the AMQP ones.
    if conf.RABBITMQ_MANAGEMENT_USER:
        user, password = conf.RABBITMQ_MANAGEMENT_USER, conf.RABBITMQ_MANAGEMENT_PASSWORD
    else:
        user, password = unquote(amqp.username or "guest"), unquote(amqp.password or "guest")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    errors = []
    for base in conf.RABBITMQ_MANAGEMENT_URL.split(";"):
        try:
            request = Request(urljoin(base.strip(), path), headers={"Authorization": f"Basic {token}"})
            with _MANAGEMENT_OPENER.open(request, timeout=conf.NIGHTJAR_BROKER_TIMEOUT) as response:
                return json.load(response), ""
        except (OSError, ValueError) as error:
            errors.append(str(error))
    return None, f"management API unreachable: {'; '.join(errors)}"


def purge_queues(queue: str | None = None) -> None:
    """Empty a work queue (None: the default channel's) and its dead-letter queue (the lab's reset)."""
    queue = queue or queue_name()
    with short_channel("purge queues") as channel:
        declare(channel, queue)
        channel.queue_purge(queue)
        channel.queue_purge(dead_letter_queue_name(queue))


def publish_raw(bodies: list[bytes], *, dead: bool = False, queue: str | None = None) -> None:
    """Publish bodies as given (no contract, no properties), with confirms."""
    queue = queue or queue_name()
    with short_channel("publish") as channel:
        declare(channel, queue)
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish(exchange="", routing_key=dead_letter_queue_name(queue) if dead else queue, body=body)


def delete_queues(queue: str | None = None) -> None:
    """Delete a work queue (None: the default channel's) and its dead-letter queue (verify_handler's throwaway ones)."""
    queue = queue or queue_name()
    with short_channel("delete queues") as channel:
        channel.queue_delete(queue)
        channel.queue_delete(dead_letter_queue_name(queue))


def ping() -> None:
    """Open and close a connection within NIGHTJAR_BROKER_TIMEOUT: raises
    BrokerError if RabbitMQ is not there, frozen, or too slow to answer."""

    def connect() -> None:
        with short_channel("health check"):
            pass

    within(conf.NIGHTJAR_BROKER_TIMEOUT, "health check", connect)
