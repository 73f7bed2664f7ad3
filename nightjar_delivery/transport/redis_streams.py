"""The Redis Streams transport: everything that speaks Redis. redis-py is
imported here and nowhere else (the benchmark's raw ceiling aside).

How it keeps the promise RabbitMQ keeps with confirms, acks and a quorum queue:
- Published means durable: XADD's reply comes after the AOF fsync, because
  the server must run with `appendonly yes` and `appendfsync always`
  (system check nightjar.E003). Redis 7.0 has no WAITAOF.
- The stream is the channel's queue, the consumer group `nightjar`; an entry
  read by a consumer stays in the group's pending list until XACK, which the
  worker sends only after its commit (one XACK for a batch).
- Redelivery: a consumer first reads its own pending entries (XREADGROUP with
  id 0), so a worker restarted under the same consumer name sees what it held
  (`redelivered=True`); entries pending under a consumer that is gone are
  claimed with XAUTOCLAIM once idle for NIGHTJAR_CLAIM_IDLE_SECONDS. A live
  consumer keeps what it holds from being claimed however long a body runs:
  a thread of its own resets their idle time (XCLAIM ... JUSTID) three times
  per NIGHTJAR_CLAIM_IDLE_SECONDS. So a claim means the owner went silent
  (dead, frozen, cut off); the completion key makes even that harmless.
- Read-ahead (service mode): once the buffer is down to half the prefetch,
  the XACKs of what was committed and the next XREADGROUP go out at once,
  and their reply is read when the buffer runs empty (or by whatever uses
  the connection first): the server's AOF fsync of the read overlaps the
  worker's handling instead of stalling it. At most `prefetch` entries
  held, as without it.
- Give up: the worker parks after its own count of failures; as a backstop
  (what RabbitMQ's x-delivery-limit is), an entry handed out more than
  NIGHTJAR_DELIVERY_LIMIT + 1 times (the pending entry's delivery counter,
  Ctrl+C returns included) is moved to `<queue>.dead` (XADD there, then XACK).
- Retention: XADD trims the stream to about NIGHTJAR_STREAM_MAXLEN entries.
  An entry trimmed before it was handled only loses its message: the
  intent is in the database and reconcile publishes it again.
"""

import collections
import contextlib
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import redis
import redis.exceptions

from nightjar_delivery import conf, supervisor
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

GROUP = "nightjar"
DEAD_PREFIX = "dead:"  # tags of entries read from the dead-letter stream
# How often a consumer looks for entries a vanished consumer left pending.
CLAIM_EVERY_SECONDS = 5.0
ACTIVE_CONSUMER_MS = 10_000

# What these clients read back (decode_responses off, RESP2): bytes, never str. redis-py's
# own types cover every decoding and protocol (bytes | str, dicts under RESP3), so
# the replies of XREADGROUP and XRANGE are cast to these where they are read.
Fields = dict[bytes, bytes]
Entry = tuple[bytes, Fields | None]  # None: trimmed while it was pending
StreamsReply = list[tuple[bytes | str, list[Entry]]]  # XREADGROUP's: (stream, its entries) per stream


def client(*, socket_timeout: float | None = None, client_name: str | None = None) -> redis.Redis:
    """A client with deadlines on every call: a frozen server (it accepts TCP,
    answers nothing) costs at most the timeout."""
    timeout = socket_timeout or conf.NIGHTJAR_BROKER_TIMEOUT
    return redis.Redis.from_url(
        conf.NIGHTJAR_BROKER_URL,
        socket_timeout=timeout,
        socket_connect_timeout=conf.NIGHTJAR_BROKER_TIMEOUT,
        retry_on_timeout=False,
        health_check_interval=0,
        client_name=client_name,
    )


def worker_client_name(queue: str) -> str:
    """The name (CLIENT SETNAME) of every worker connection to this queue:
    status counts the connections open now, as RabbitMQ counts consumers."""
    return "nightjar-worker:" + "".join(c if c > " " else "_" for c in queue)


def translated(action: str, error: Exception) -> BrokerError:
    detail = str(error) or type(error).__name__
    return BrokerError(f"Redis at {masked_url()} is unavailable ({action}): {detail}")


def ensure_group(connection: redis.Redis, queue: str) -> None:
    """The stream and its consumer group, made idempotently by both sides.
    From id 0: entries published before the group existed are not skipped."""
    try:
        connection.xgroup_create(queue, GROUP, id="0", mkstream=True)
    except redis.exceptions.ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


class Publisher:
    """One client per process; XADD with the stream's approximate MAXLEN."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None
        self._backoff = Backoff()
        self._groups: set[str] = set()  # the queues whose group this client made sure of

    def publish(self, body: bytes, *, message_id: str, queue: str) -> None:
        self._backoff.check()
        try:
            if self._client is None:
                connection = client()
                try:
                    refuse_unless_durable(connection)  # once per connection: an XADD it may lose is no publish
                except NotDurable:
                    connection.close()
                    raise
                self._client = connection
            if queue not in self._groups:
                ensure_group(self._client, queue)
                self._groups.add(queue)
            self._client.xadd(
                queue,
                {"body": body, "message_id": message_id},
                maxlen=conf.NIGHTJAR_STREAM_MAXLEN,
                approximate=True,
            )
        except redis.exceptions.RedisError as error:
            self.reset_connection()
            self._backoff.failed()
            raise translated("publish", error) from None
        except NotDurable:
            self._backoff.failed()
            raise
        self._backoff.succeeded()

    def reset_connection(self) -> None:
        connection, self._client, self._groups = self._client, None, set()
        if connection is not None:
            connection.close()

    def reset(self) -> None:
        self.reset_connection()
        self._backoff = Backoff()


publisher = Publisher()


def consumer_name() -> str:
    """Stable across restarts, so a restarted worker finds what it held (each
    child of `nightjar_worker --processes N` adds its slot: one name per child)."""
    return (conf.NIGHTJAR_CONSUMER_NAME or socket.gethostname()) + supervisor.child_suffix()


class Consumer:
    """The worker's side of the stream. Every method raises BrokerError, never
    a redis-py exception."""

    def __init__(self, *, prefetch: int = 1, queue: str) -> None:
        self.queue, self.dead = queue, dead_letter_queue_name(queue)
        self.prefetch = prefetch
        self.name = consumer_name()
        # Blocking reads wait up to a few seconds: the socket must outwait them.
        self._client = client(socket_timeout=conf.NIGHTJAR_BROKER_TIMEOUT + 10, client_name=worker_client_name(queue))
        where = self._client.connection_pool.connection_kwargs
        self.node = f"{where.get('host', where.get('path', ''))}:{where.get('port', '')}".rstrip(":")
        self._read_own_pending = True  # at start, and after a hand-back
        self._last_claim = 0.0
        # Read but not yet handed out: a batch that stops early leaves the rest here.
        self._buffer: collections.deque[Delivery] = collections.deque()
        # Entries found deleted while pending (trimmed before they were
        # handled): the worker records them for staff and empties this list.
        self.lost: list[str] = []
        # Deferred acks (flush=False, service mode): committed entries whose
        # XACK goes out in one pipeline with the next read, saving a round
        # trip per delivery; sent on their own before re-reading the own
        # pending list, when idle, on close, and past the prefetch. One lost
        # in a crash only means a redelivery, which the completion key absorbs.
        self._deferred: list[str] = []
        # Entries read and not yet XACKed (handled, in the buffer, or with a
        # deferred ack): the keeper thread keeps their idle time short. Every
        # use of the client holds the lock: one connection, one thread at a time.
        self._held: set[str] = set()
        self._lock = threading.RLock()
        # A read-ahead sent and not yet answered: (connection, the pipeline's
        # commands, the tags its XACK carries). Whoever takes the lock reads
        # its reply first (_settle), so the connection is never out of step.
        self._ahead: tuple[Any, list[Any], list[str]] | None = None
        self._stopped = threading.Event()
        try:
            ensure_group(self._client, self.queue)
        except redis.exceptions.RedisError as error:
            raise translated("connect", error) from None
        every = max(conf.NIGHTJAR_CLAIM_IDLE_SECONDS / 3, 0.05)
        threading.Thread(
            target=_keep_holding, args=(weakref.ref(self), every), name="nightjar-keep-entries", daemon=True
        ).start()

    def keep_holding(self, wait: float) -> bool:
        """One turn of the keeper thread: reset the idle time of every entry
        this consumer holds, so no other consumer's XAUTOCLAIM takes it from
        a live worker (JUSTID: no delivery is counted). False once closed."""
        if self._stopped.is_set():
            return False
        if not self._lock.acquire(timeout=wait):
            return True  # the worker is reading: nothing is running long now
        try:
            self._settle()
            if self._held:
                kept = self._client.xclaim(self.queue, GROUP, self.name, 0, list(self._held), justid=True)
                # What is no longer pending (acked by a consumer that claimed it while
                # this one was frozen, or trimmed) is not ours to keep: forget it.
                self._held.intersection_update(k.decode() if isinstance(k, bytes) else k for k in kept)
        finally:
            self._lock.release()
        return True

    def _acked(self, tags: Iterable[str]) -> None:
        self._held.difference_update(tags)

    def get(self, *, dead: bool = False) -> Delivery | None:
        """Take one delivery (unacknowledged until ack), or None."""
        if dead:
            return self._get_dead()
        if not self._buffer:
            self._buffer.extend(self._take(1, block_ms=None))
        return self._buffer.popleft() if self._buffer else None

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        """Yield deliveries as they arrive; None after idle_seconds without one."""
        while True:
            if not self._buffer:
                self._buffer.extend(self._take(self.prefetch, block_ms=max(int(idle_seconds * 1000), 1)))
            yield self._buffer.popleft() if self._buffer else None

    def waiting(self) -> list[bytes]:
        """The bodies of entries read and not yet yielded, without taking them
        (a hint for looking their intents up at once)."""
        return [delivery.body for delivery in self._buffer]

    def _take(self, count: int, *, block_ms: int | None) -> list[Delivery]:
        with self._lock:
            return self._take_locked(count, block_ms=block_ms)

    def _take_locked(self, count: int, *, block_ms: int | None) -> list[Delivery]:
        try:
            self._settle()
            if self._buffer:
                return []  # the read-ahead's entries (this call or the keeper thread read them): those first
            if self._read_own_pending:
                self.flush_acks()  # first: a read of our own pending list must not see what is done
            while self._read_own_pending:
                # One at a time: the worker may have died on one of them, and each read
                # counts a delivery of every entry it returns (the dead-letter backstop's
                # count): its neighbours must not be charged for the culprit's deaths.
                entries = cast(StreamsReply, self._client.xreadgroup(GROUP, self.name, {self.queue: "0"}, count=1))
                own = self._deliveries(entries, redelivered=True)
                if own:
                    return own
                # Empty: the list is done. An entry dead-lettered or trimmed (and XACKed)
                # instead: read on, or the entries behind it would wait for a claim.
                self._read_own_pending = any(stream_entries for _, stream_entries in (entries or []))
            if time.monotonic() - self._last_claim >= CLAIM_EVERY_SECONDS:
                self._last_claim = time.monotonic()
                self.flush_acks()  # first: what is done here must not come back as idle
                claimed = self._claim(count)
                if claimed:
                    return claimed
            # The deferred acks go out in the same round trip, ahead of the read.
            pipe = self._client.pipeline(transaction=False)
            if self._deferred:
                pipe.xack(self.queue, GROUP, *self._deferred)
            pipe.xreadgroup(GROUP, self.name, {self.queue: ">"}, count=count, block=block_ms)
            entries = pipe.execute()[-1]
            self._acked(self._deferred)
            self._deferred = []
            return self._deliveries(entries, redelivered=False)
        except redis.exceptions.RedisError as error:
            raise translated("consume", error) from None

    def _read_ahead(self) -> None:
        """Send the deferred XACKs and the next XREADGROUP (no BLOCK: an empty
        stream answers at once) without waiting for the reply; the lock is
        held. A send that fails leaves the acks deferred and the own pending
        list to read first: the next call reconnects, sends them, reads what
        the broken write may have taken, and reports a broker that is gone."""
        count = self.prefetch - len(self._buffer)  # what is held stays within the prefetch
        pipe = self._client.pipeline(transaction=False)
        acks = self._deferred
        if acks:
            pipe.xack(self.queue, GROUP, *acks)
        pipe.xreadgroup(GROUP, self.name, {self.queue: ">"}, count=count)
        pool = self._client.connection_pool
        try:
            connection = pool.get_connection()
        except redis.exceptions.RedisError:
            return
        try:
            commands = list(pipe.command_stack)
            connection.send_packed_command(connection.pack_commands([args for args, _ in commands]))
        except redis.exceptions.RedisError:
            connection.disconnect()
            pool.release(connection)
            # The write may have reached the server: what its read took is pending here, unseen.
            self._read_own_pending = True
            return
        self._ahead, self._deferred = (connection, commands, acks), []

    def _settle(self) -> None:
        """Read the read-ahead's reply, if one is due (the lock is held): its
        acks are done, its entries go to the end of the buffer; dropped after
        a hand-back, when the own pending list, which holds them, is read
        first. The connection goes back to the pool either way."""
        if self._ahead is None:
            return
        (connection, commands, acks), self._ahead = self._ahead, None
        pool = self._client.connection_pool
        try:
            replies = [self._client.parse_response(connection, args[0], **options) for args, options in commands]
        except redis.exceptions.RedisError as error:
            connection.disconnect()  # a reply may be left unread: never reuse it
            self._deferred[:0] = acks  # not known to be done: sent again (a repeated XACK is harmless)
            self._read_own_pending = True  # what it read, if anything, is pending here: read it from there
            raise translated("consume", error) from None
        finally:
            pool.release(connection)
        self._acked(acks)
        deliveries = self._deliveries(replies[-1], redelivered=False)
        if not self._read_own_pending:
            self._buffer.extend(deliveries)

    def _claim(self, count: int) -> list[Delivery]:
        """Entries idle under another consumer: walk XAUTOCLAIM's cursor to the end."""
        idle_ms = int(conf.NIGHTJAR_CLAIM_IDLE_SECONDS * 1000)
        cursor: bytes | str = "0-0"
        claimed: list[Entry] = []
        while len(claimed) < count:
            cursor, entries, deleted = self._client.xautoclaim(
                self.queue, GROUP, self.name, min_idle_time=idle_ms, start_id=cursor, count=count - len(claimed)
            )
            self._note_trimmed(deleted)
            claimed += entries
            if cursor in (b"0-0", "0-0"):
                break
        return self._deliveries([(self.queue, claimed)], redelivered=True) if claimed else []

    def _deliveries(self, reply: StreamsReply | None, *, redelivered: bool) -> list[Delivery]:
        entries = [entry for _, stream_entries in (reply or []) for entry in stream_entries]
        counts = self._delivery_counts(entries) if redelivered else {}
        limit = conf.NIGHTJAR_DELIVERY_LIMIT + 1  # once per read: a settings lookup costs µs
        deliveries = []
        for entry_id, fields in entries:
            tag = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            if fields is None:  # trimmed while it was pending: the body is gone
                self._note_trimmed([tag])
                self._client.xack(self.queue, GROUP, tag)
                continue
            times = counts.get(tag, 1)
            if times > limit:
                self._dead_letter(tag, fields, times)
                continue
            self._held.add(tag)
            message_id = fields.get(b"message_id", b"")
            deliveries.append(
                Delivery(
                    body=fields.get(b"body", b""),
                    tag=tag,
                    redelivered=redelivered,
                    message_id=message_id.decode("utf-8", "replace"),
                    attempts=times - 1,
                )
            )
        return deliveries

    def _delivery_counts(self, entries: list[Entry]) -> dict[str, int]:
        if not entries:
            return {}
        first, last = entries[0][0], entries[-1][0]
        rows = self._client.xpending_range(
            self.queue, GROUP, min=first, max=last, count=len(entries) + 10_000, consumername=self.name
        )
        return {
            (row["message_id"].decode() if isinstance(row["message_id"], bytes) else str(row["message_id"])): int(
                row["times_delivered"]
            )
            for row in rows
        }

    def _dead_letter(self, tag: str, fields: dict[Any, Any], times: int) -> None:
        # XADD to the dead stream first, then XACK: a crash in between leaves
        # a copy in both, never in neither.
        self._client.xadd(
            self.dead,
            {**fields, b"reason": b"delivery_limit", b"attempts": str(times).encode(), b"entry": tag.encode()},
        )
        self._client.xack(self.queue, GROUP, tag)
        logger.warning("Entry %s was delivered %d times; moved to %s", tag, times, self.dead)

    def _note_trimmed(self, ids: Iterable[bytes | str]) -> None:
        for entry_id in ids:
            tag = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            self.lost.append(tag)
            logger.warning(
                "Entry %s of %s was trimmed before it was handled; reconcile republishes its stored intent",
                tag,
                self.queue,
            )

    def _get_dead(self) -> Delivery | None:
        try:
            with self._lock:
                self._settle()
                entries = cast("list[tuple[bytes, Fields]]", self._client.xrange(self.dead, count=1))
        except redis.exceptions.RedisError as error:
            raise translated("get", error) from None
        if not entries:
            return None
        entry_id, fields = entries[0]
        return Delivery(
            body=fields.get(b"body", b""),
            tag=DEAD_PREFIX + entry_id.decode(),
            redelivered=True,
            message_id=fields.get(b"message_id", b"").decode("utf-8", "replace"),
            attempts=int(fields.get(b"attempts", b"0") or 0),
        )

    def ack(self, tag: Any, *, multiple: bool = False, flush: bool = True) -> None:
        """XACK after the commit (a dead-letter entry is deleted instead)."""
        if flush or tag.startswith(DEAD_PREFIX):
            self.ack_many([tag], flush=flush)
        else:
            self._defer([tag])  # the per-delivery path, once per entry: no list work

    def ack_many(self, tags: list[Any], *, flush: bool = True) -> None:
        """One XACK for a batch's entries; flush=False defers it (see _deferred)."""
        dead = [tag[len(DEAD_PREFIX) :] for tag in tags if str(tag).startswith(DEAD_PREFIX)]
        live = [tag for tag in tags if not str(tag).startswith(DEAD_PREFIX)]
        if not flush and not dead:
            self._defer(live)
            return
        try:
            with self._lock:
                self._settle()
                live, self._deferred = self._deferred + live, []
                if live:
                    self._client.xack(self.queue, GROUP, *live)
                    self._acked(live)
                if dead:
                    self._client.xdel(self.dead, *dead)
        except redis.exceptions.RedisError as error:
            raise translated("ack", error) from None

    def _defer(self, tags: list[str]) -> None:
        """Committed entries whose XACK waits for the next read, at the latest:
        a read-ahead once the buffer is down to half the prefetch (in batch
        mode with --prefetch twice --batch: a batch is read while the one
        before it is handled)."""
        self._deferred += tags
        if len(self._deferred) > self.prefetch:
            self.flush_acks()
        elif self._ahead is None and not self._read_own_pending and len(self._buffer) <= self.prefetch // 2:
            with self._lock:
                if self._ahead is None:
                    self._read_ahead()

    def flush_acks(self) -> None:
        """Send the deferred acks now, if any."""
        if self._deferred:
            self.ack_many([])

    def requeue(self, tag: Any) -> None:
        """Hand a delivery back: it stays in this consumer's pending list and
        is read again first (its delivery counter grows each time). What the
        buffer held is pending too, and is read again with it. Under the lock:
        the keeper thread may be settling a read-ahead into the buffer."""
        with self._lock:
            self._buffer.clear()
            self._read_own_pending = True

    def stop_consuming(self) -> None:
        """Nothing to cancel: unacked entries stay pending under this consumer's name."""
        self.flush_acks()

    def keepalive(self, seconds: float = 0) -> None:
        self.flush_acks()
        time.sleep(seconds)  # no heartbeats to answer; an idle client loses nothing

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(BrokerError):
            with self._lock:
                self._settle()
            self.flush_acks()
        with self._lock:
            self._client.close()


def _keep_holding(consumer_ref, every: float) -> None:
    """The keeper thread of a Consumer (held weakly: a consumer nobody
    closed still goes away). A failed call is tried again at the next turn;
    the worker's own calls report a broker that is gone."""
    background_thread()
    stopped = consumer_ref()._stopped
    while not stopped.wait(every):
        consumer = consumer_ref()
        try:
            if consumer is None or not consumer.keep_holding(every):
                return
        except (redis.exceptions.RedisError, BrokerError) as error:
            logger.info("Could not refresh the entries this worker holds: %s", error)
        finally:
            del consumer


_T = TypeVar("_T")


def short_call(action: str, function: Callable[[redis.Redis], _T]) -> _T:
    """function(client) on a fresh client whose socket timeouts are the deadline; BrokerError on failure."""
    try:
        return function(client())
    except redis.exceptions.RedisError as error:
        raise translated(action, error) from None


def queue_counts(queue: str) -> dict[str, Any]:
    """Stream length, entries not yet read by the group, pending (per consumer), consumers, dead.
    All as they are now: pending entries stay pending (unacknowledged) after
    their worker is gone, until a worker claims them."""

    def count(connection: redis.Redis) -> dict[str, Any]:
        ensure_group(connection, queue)
        group = next(g for g in connection.xinfo_groups(queue) if g["name"] in (GROUP, GROUP.encode()))
        consumers = connection.xinfo_consumers(queue, GROUP)
        return {
            "ready": group.get("lag") or 0,
            "unacked": group["pending"],
            "unacked_error": "",
            "consumers": attached_workers(connection, consumers, queue),
            "pending_per_consumer": {
                (c["name"].decode() if isinstance(c["name"], bytes) else c["name"]): c["pending"] for c in consumers
            },
            "dead": connection.xlen(dead_letter_queue_name(queue)),
            "length": connection.xlen(queue),
        }

    return short_call("queue status", count)


def attached_workers(connection: redis.Redis, consumers: list[dict[str, Any]], queue: str) -> int:
    """Like RabbitMQ's count, the worker connections open now (the group
    remembers consumers long gone, and a Ctrl+C'd one looks recent for a
    while). Where CLIENT LIST is refused (an ACL without @admin): the group's
    consumers that asked within ACTIVE_CONSUMER_MS — a serving worker asks
    every few seconds — which lags by that much."""
    try:
        clients = connection.client_list()
    except redis.exceptions.ResponseError:
        return sum(1 for c in consumers if c["idle"] < ACTIVE_CONSUMER_MS)
    return sum(1 for c in clients if c.get("name") == worker_client_name(queue))


def ping() -> None:
    short_call("health check", lambda connection: connection.ping())


# What every refusal of a server that may lose acknowledged entries tells its operator to set.
DURABLE_SETTINGS = (
    "appendonly yes and appendfsync always (in redis.conf; or at once: CONFIG SET appendonly yes, "
    "CONFIG SET appendfsync always, then CONFIG REWRITE to keep them)"
)


class NotDurable(BrokerError):
    """The server would acknowledge an XADD before it is on disk."""


def problems_of(connection: redis.Redis) -> list[str]:
    """What the server's configuration says against "published means durable"."""
    config = {**connection.config_get("appendonly"), **connection.config_get("appendfsync")}
    problems = []
    if config.get("appendonly") != "yes":
        problems.append(f"appendonly is {config.get('appendonly')!r}, not 'yes'")
    if config.get("appendfsync") != "always":
        problems.append(f"appendfsync is {config.get('appendfsync')!r}, not 'always'")
    return problems


def durability_problems() -> list[str]:
    """problems_of() a fresh client. Raises BrokerError (unreachable, or CONFIG refused)."""
    return short_call("configuration", problems_of)


def durability_refusal(problems: list[str]) -> str:
    """The sentence every refusal of such a server says (publish, worker, check)."""
    return (
        f"Redis at {masked_url()} would acknowledge entries it may lose ({'; '.join(problems)}): "
        f"run it with {DURABLE_SETTINGS}."
    )


def refuse_unless_durable(connection: redis.Redis) -> None:
    """Raise NotDurable on a server that may lose acknowledged entries. A
    server that refuses CONFIG (an ACL without it, a managed Redis) cannot
    be asked: not refused, as the worker does not refuse it."""
    try:
        problems = problems_of(connection)
    except redis.exceptions.ResponseError:
        return
    if problems:
        raise NotDurable(durability_refusal(problems))


def purge_queues(queue: str | None = None) -> None:
    queue = queue or queue_name()
    short_call("purge", lambda connection: connection.delete(queue, dead_letter_queue_name(queue)))


def delete_queues(queue: str | None = None) -> None:
    purge_queues(queue)


def publish_raw(bodies: list[bytes], *, dead: bool = False, queue: str | None = None) -> None:
    queue = queue or queue_name()

    def add(connection: redis.Redis) -> None:
        ensure_group(connection, queue)
        for body in bodies:
            connection.xadd(dead_letter_queue_name(queue) if dead else queue, {"body": body})

    short_call("publish", add)
