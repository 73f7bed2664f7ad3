"""The database transport: the queue is rows of the project's own database,
PostgreSQL or SQLite; no broker to run. NIGHTJAR_BROKER_URL `db://default`
names the Django database alias that holds them (`db://queue` another one).
The rows are nightjar_delivery.models.Message (table nightjar_delivery_message).

How it keeps the promise the brokers keep:
- Published means durable: publish is an INSERT, committed when it returns,
  or with the caller's transaction when called inside one: then it is rolled
  back with it. The engine publishes a new intent inside the transaction that
  writes it when the queue is in the intent's database (reconcile.
  publish_on_commit): the two commit together. On PostgreSQL the same
  statement NOTIFYs the queue's channel, sent at commit.
- Claim: one UPDATE of the oldest ready rows (lease_until NULL or past) of
  the queue; on PostgreSQL their SELECT is FOR UPDATE SKIP LOCKED, so workers
  on several machines never wait for each other nor take the same row. The
  claim writes who holds the row, until when (the lease:
  NIGHTJAR_CLAIM_IDLE_SECONDS, renewed by a thread of the consumer three times
  per lease while it holds rows, however long a body runs) and counts the
  delivery. SQLite: each claim is one statement, the write lock held for it
  alone; an idle worker only reads (is anything ready?) until something is.
- Ack after commit: DELETE of the rows. Stronger where it can be: the worker
  arms ack_within() around the handler, and the DELETE runs in the handler's
  own transaction just before its COMMIT (sql.before_commit): a crash after
  that commit has nothing to redeliver. Hand back: the claim is cleared.
- Redelivery: a row whose lease ran out is ready again; so is one whose holder
  is gone (PostgreSQL: its backend pid is no longer in pg_stat_activity;
  SQLite: the worker's process is gone), looked for when a consumer starts
  and every RESCUE_EVERY seconds: a killed worker's rows come back at once.
- Give up: the worker parks after its own count of failures; as a backstop a
  row taken more than NIGHTJAR_DELIVERY_LIMIT + 1 times moves to the queue
  `<queue>.dead` (one UPDATE of its queue), as Redis Streams does.
- Wake-ups: PostgreSQL LISTENs on a connection of its own and waits for the
  NOTIFY (select() on its socket, bounded); SQLite polls, every 10 ms doubling
  to 200 ms while idle (at once for a publish from the same process).
Every statement waits at most the database's own timeouts; every failure is a
BrokerError.
"""

import collections
import contextlib
import hashlib
import itertools
import logging
import os
import select
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db import Error as DjangoDatabaseError
from django.utils.connection import ConnectionDoesNotExist

from nightjar_delivery import conf, sql
from nightjar_delivery.transport import (
    Backoff,
    BrokerError,
    Delivery,
    background_thread,
    dead_letter_queue_name,
    queue_name,
)

logger = logging.getLogger(__name__)

TABLE = "nightjar_delivery_message"
# The database's clock, in seconds since the epoch: leases compare on one clock.
NOW = {
    "postgresql": "extract(epoch from clock_timestamp())::float8",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}
RESCUE_EVERY = 5.0  # how often a consumer looks for rows held by a holder that is gone
POLL_FIRST, POLL_MAX = 0.01, 0.2  # SQLite's idle poll
WAIT_MAX = 1.0  # PostgreSQL: the longest wait for a NOTIFY before looking again (leases run out silently)


def alias() -> str:
    """The Django database alias the broker URL names (db://default)."""
    parts = urlsplit(conf.NIGHTJAR_BROKER_URL.split(";")[0].strip())
    return parts.netloc or parts.path.strip("/") or DEFAULT_DB_ALIAS


def _errors() -> tuple[type[Exception], ...]:
    found: list[type[Exception]] = [DjangoDatabaseError, sqlite3.Error, ConnectionDoesNotExist, OSError, ValueError]
    with contextlib.suppress(ImportError):
        import psycopg

        found.append(psycopg.Error)
    return tuple(found)


ERRORS = _errors()


def translated(action: str, error: Exception) -> BrokerError:
    detail = str(error).strip() or type(error).__name__
    return BrokerError(f"The database queue (database {alias()!r}) is unavailable ({action}): {detail}")


def vendor(using: str) -> str:
    try:
        found = connections[using].vendor
    except ConnectionDoesNotExist:
        raise BrokerError(f"The broker URL names the database {using!r}, which DATABASES does not have.") from None
    if found not in NOW:
        raise BrokerError(f"The database queue needs PostgreSQL or SQLite; the database {using!r} is {found}.")
    return found


def channel_name(queue: str) -> str:
    """The queue's LISTEN/NOTIFY channel (PostgreSQL identifiers: 63 bytes at most)."""
    name = f"nightjar.{queue}"
    return name if len(name.encode()) <= 63 else "nightjar." + hashlib.sha1(queue.encode()).hexdigest()


def in_list(count: int) -> str:
    return ", ".join(["%s"] * count)


# A publish from this process wakes this process's idle SQLite consumers at once.
_published = threading.Condition()


def insert(bodies: list[bytes], *, queue: str, message_id: str = "") -> None:
    """The rows, on this thread's connection to the queue's database: in the
    caller's transaction when there is one (a savepoint, so a failure leaves
    it usable), else committed now. Raises BrokerError."""
    using = alias()
    kind = vendor(using)
    now = NOW[kind]
    values = f"INSERT INTO {TABLE} (queue, body, message_id, created, deliveries, claimed_by) VALUES (%s, %s, %s, {now}, 0, '')"
    if kind == "postgresql":
        # One statement: the row and its NOTIFY commit together.
        statement, notify = f"WITH m AS ({values}) SELECT pg_notify(%s, '')", [channel_name(queue)]
    else:
        statement, notify = values, []
    rows = [[queue, body, message_id, *notify] for body in bodies]
    try:
        db = connections[using]
        if kind == "postgresql" and db.in_atomic_block:
            _in_a_savepoint_at_once(db, statement, rows)
        else:
            with transaction.atomic(using=using) if db.in_atomic_block else contextlib.nullcontext():
                for params in rows:
                    sql.execute(statement, params, using=using, fetch=False)
    except ERRORS as error:
        raise translated("publish", error) from None
    # This process's idle consumers look once the rows are there to see: after the commit.
    transaction.on_commit(_wake_consumers, using=using)


def _wake_consumers() -> None:
    with _published:
        _published.notify_all()


def _in_a_savepoint_at_once(db: Any, statement: str, rows: list[list[Any]]) -> None:
    """Inside the caller's transaction on PostgreSQL: SAVEPOINT, the rows and
    RELEASE in one round trip (a psycopg pipeline), where Django's atomic
    block sends each alone (a registration's or an enqueue's message: two
    round trips saved). A failure rolls back to the savepoint, so the
    caller's transaction goes on, and raises."""
    raw = db.connection  # (open: a transaction is under way on it)
    with db.wrap_database_errors:
        try:
            with raw.pipeline(), sql.server_side_cursor(raw) as cursor:
                cursor.execute("SAVEPOINT nightjar_publish")
                for params in rows:
                    cursor.execute(statement, params)
                cursor.execute("RELEASE SAVEPOINT nightjar_publish")
        except BaseException:
            with contextlib.suppress(*ERRORS):  # (a connection gone: the caller's transaction is lost anyway)
                raw.execute("ROLLBACK TO SAVEPOINT nightjar_publish")
                raw.execute("RELEASE SAVEPOINT nightjar_publish")
            raise


class Publisher:
    def __init__(self) -> None:
        self._backoff = Backoff()

    def publish(self, body: bytes, *, message_id: str, queue: str) -> None:
        self._backoff.check()
        try:
            insert([body], queue=queue, message_id=message_id)
        except BrokerError:
            self._backoff.failed()
            raise
        self._backoff.succeeded()

    def reset(self) -> None:
        self._backoff = Backoff()


publisher = Publisher()


def open_connection(using: str, *, application_name: str = "") -> Any:
    """A connection of the consumer's own (autocommit), with the settings of
    the alias: Django's wrapper, not registered in `connections`."""
    db = connections[using]
    settings_dict = {**db.settings_dict, "OPTIONS": {**db.settings_dict.get("OPTIONS", {})}}
    if db.vendor == "postgresql" and application_name:
        settings_dict["OPTIONS"]["application_name"] = application_name[:63]
    own = type(db)(settings_dict, using)
    own.ensure_connection()
    return own


def worker_application_name(queue: str) -> str:
    """PostgreSQL's application_name of every consumer connection of this queue: status counts them."""
    return ("nightjar-worker:" + queue)[:63]


_numbers = itertools.count(1)


class Consumer:
    """The worker's side of one queue. Every method raises BrokerError.
    Tags are the rows' ids."""

    def __init__(self, *, prefetch: int = 1, queue: str) -> None:
        self.queue, self.dead = queue, dead_letter_queue_name(queue)
        self.prefetch = max(prefetch, 1)
        self.lost: list[str] = []  # nothing is ever trimmed here
        self.using = alias()
        self.vendor = vendor(self.using)
        # host:pid:n — the host and pid are SQLite's test of a holder that is gone.
        self.claimer = f"{socket.gethostname()}:{os.getpid()}:{next(_numbers)}"[:255]
        self._lock = threading.RLock()  # one statement at a time on the connection (the keeper thread shares it)
        self._buffer: collections.deque[Delivery] = collections.deque()  # claimed, not yet handed out
        self._held: set[int] = set()  # claimed and not acked (handed out or buffered)
        self._deferred: list[int] = []  # acks sent with the next statement (flush=False)
        self.acked_in_transaction: set[int | str] = set()  # acked in the handler's transaction (ack_within)
        self._stopped = threading.Event()
        self._own: Any = None  # its own connection (a Django database wrapper), opened below
        self._listen: Any = None  # PostgreSQL: the LISTEN connection (psycopg's)
        self._last_rescue = 0.0
        self._poll = POLL_FIRST
        now = NOW[self.vendor]
        # PostgreSQL: the ids in an ARRAY(), evaluated once (an IN over a LIMIT subquery may be re-run).
        pick, among = "ORDER BY id LIMIT %s", "IN ({})"
        if self.vendor == "postgresql":
            pick, among = pick + " FOR UPDATE SKIP LOCKED", "= ANY(ARRAY({}))"
        ready = f"SELECT id FROM {TABLE} WHERE queue = %s AND (lease_until IS NULL OR lease_until < {now}) {pick}"
        self._claim_sql = (
            f"UPDATE {TABLE} SET claimed_by = %s, holder = %s, lease_until = {now} + %s, deliveries = deliveries + %s"
            f" WHERE id {among.format(ready)} RETURNING id, body, message_id, deliveries"
        )
        self._ready_sql = (
            f"SELECT 1 FROM {TABLE} WHERE queue = %s AND (lease_until IS NULL OR lease_until < {now}) LIMIT 1"
        )
        skip = " FOR UPDATE SKIP LOCKED" if self.vendor == "postgresql" else ""
        # Rows being deleted by the handler's transaction are locked: skipped, not waited for.
        self._renew_sql = (
            f"UPDATE {TABLE} SET lease_until = {now} + %s WHERE id IN"
            f" (SELECT id FROM {TABLE} WHERE queue IN (%s, %s) AND claimed_by = %s{skip})"
        )
        try:
            self._own = open_connection(self.using, application_name=worker_application_name(queue))
            if self.vendor == "postgresql":
                from psycopg import sql as pgsql

                (self.holder,) = self._run("SELECT pg_backend_pid()")[0]
                self._listen = open_connection(self.using).connection
                self._listen.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel_name(queue))))
                params = self._own.connection.info
                self.node = f"PostgreSQL {params.host}:{params.port}/{params.dbname}"
            else:
                self.holder = os.getpid()
                self.node = f"SQLite {self._own.settings_dict['NAME']}"
            self._rescue()
        except BaseException as error:
            self._close_connections()
            if isinstance(error, ERRORS):
                raise translated("connect", error) from None
            raise
        every = max(conf.NIGHTJAR_CLAIM_IDLE_SECONDS / 3, 0.05)
        threading.Thread(
            target=_keep_holding, args=(weakref.ref(self), every), name="nightjar-keep-rows", daemon=True
        ).start()

    # -- statements on the consumer's own connection --

    def _run(self, statement: str, params: Sequence[Any] = (), *, rows: bool = True) -> Any:
        """One statement (written with %s), committed when it returns; its rows, or its row count."""
        with self._lock:
            raw = self._own.connection
            if self.vendor == "sqlite":
                cursor = raw.cursor()
                statement = statement.replace("%s", "?")
            else:
                cursor = sql.server_side_cursor(raw)
            try:
                cursor.execute(statement, params)
                return cursor.fetchall() if rows else cursor.rowcount
            finally:
                cursor.close()

    def _claim(self, count: int, *, queue: str | None = None, counted: bool = True) -> list[Delivery]:
        """Take up to count ready rows (the oldest first); deliveries of them."""
        with self._lock:
            self._flush()
            if time.monotonic() - self._last_rescue >= RESCUE_EVERY:
                self._rescue()
            lease = conf.NIGHTJAR_CLAIM_IDLE_SECONDS
            rows = self._run(
                self._claim_sql, [self.claimer, self.holder, lease, int(counted), queue or self.queue, count]
            )
            rows.sort()
            limit = conf.NIGHTJAR_DELIVERY_LIMIT + 1
            deliveries = []
            for tag, body, message_id, times in rows:
                if counted and times > limit:
                    self._dead_letter(tag, times)
                    continue
                self._held.add(tag)
                deliveries.append(
                    Delivery(
                        body=bytes(body),
                        tag=tag,
                        redelivered=times > 1 or not counted,
                        message_id=message_id,
                        attempts=times - 1 if counted else times,
                    )
                )
            return deliveries

    def _dead_letter(self, tag: int, times: int) -> None:
        self._run(
            # Its count: the times it was handed out (not this take, which handed out nothing).
            f"UPDATE {TABLE} SET queue = %s, claimed_by = '', holder = NULL, lease_until = NULL,"
            " deliveries = deliveries - 1 WHERE id = %s",
            [self.dead, tag],
            rows=False,
        )
        logger.warning("Message %s was delivered %d times; moved to %s", tag, times - 1, self.dead)

    def _rescue(self) -> None:
        """Make the rows of holders that are gone ready again (their count stays)."""
        self._last_rescue = time.monotonic()
        now = NOW[self.vendor]
        if self.vendor == "postgresql":
            self._run(
                f"UPDATE {TABLE} SET lease_until = 0 WHERE queue = %s AND lease_until > {now} AND holder IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = holder)",
                [self.queue],
                rows=False,
            )
            return
        here = f"{socket.gethostname()}:"
        holders = self._run(
            f"SELECT DISTINCT holder, claimed_by FROM {TABLE} WHERE queue = %s AND lease_until > {now}", [self.queue]
        )
        for pid, claimed_by in holders:
            if pid is not None and claimed_by.startswith(here) and not _alive(pid):
                self._run(
                    f"UPDATE {TABLE} SET lease_until = 0 WHERE queue = %s AND claimed_by = %s",
                    [self.queue, claimed_by],
                    rows=False,
                )

    def _ready(self) -> bool:
        return bool(self._run(self._ready_sql, [self.queue]))

    def _release(self, tags: Iterable[Any], *, uncount: bool = False) -> None:
        """Clear this consumer's claim of these rows (uncount: they were never handed out)."""
        tags = list(tags)
        if not tags:
            return
        self._run(
            f"UPDATE {TABLE} SET claimed_by = '', holder = NULL, lease_until = NULL,"
            f" deliveries = deliveries - %s WHERE id IN ({in_list(len(tags))}) AND claimed_by = %s",
            [int(uncount), *tags, self.claimer],
            rows=False,
        )
        self._held.difference_update(tags)

    def _delete(self, tags: list[Any]) -> None:
        if tags:
            self._run(f"DELETE FROM {TABLE} WHERE id IN ({in_list(len(tags))})", tags, rows=False)
            self._held.difference_update(tags)

    def _flush(self) -> None:
        deferred, self._deferred = self._deferred, []
        try:
            self._delete(deferred)
        except BaseException:
            self._deferred[:0] = deferred
            raise

    # -- the Consumer protocol --

    def get(self, *, dead: bool = False) -> Delivery | None:
        """Take one delivery (unacknowledged until ack), or None."""
        try:
            if dead:
                taken = self._claim(1, queue=self.dead, counted=False)
                return taken[0] if taken else None
            if not self._buffer:
                self._buffer.extend(self._claim(1))
            return self._buffer.popleft() if self._buffer else None
        except ERRORS as error:
            raise translated("get", error) from None

    def consume(self, *, idle_seconds: float = 1.0) -> Iterator[Delivery | None]:
        """Yield deliveries as they come; None after idle_seconds without one."""
        while True:
            if not self._buffer:
                try:
                    self._buffer.extend(self._wait_and_claim(idle_seconds))
                except ERRORS as error:
                    raise translated("consume", error) from None
            yield self._buffer.popleft() if self._buffer else None

    def _wait_and_claim(self, idle_seconds: float) -> list[Delivery]:
        deadline = time.monotonic() + idle_seconds
        while True:
            taken = self._claim(self.prefetch)
            if taken:
                self._poll = POLL_FIRST
                return taken
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                if self.vendor == "postgresql":
                    self._wait_for_notify(min(left, WAIT_MAX))
                    break
                with _published:
                    _published.wait(min(left, self._poll))
                self._poll = min(self._poll * 2, POLL_MAX)
                # Only a read while idle: the write lock is taken when there is something to claim.
                if self._ready() or time.monotonic() - self._last_rescue >= RESCUE_EVERY:
                    break

    def _wait_for_notify(self, seconds: float) -> None:
        """Until a NOTIFY on the queue's channel (or seconds pass); drain what came."""
        listen = self._listen
        readable, _, _ = select.select([listen.fileno()], [], [], seconds)
        if readable:
            pgconn = listen.pgconn
            pgconn.consume_input()
            if pgconn.status != 0:  # CONNECTION_OK
                raise BrokerError("The database queue's LISTEN connection was closed.")
            while pgconn.notifies() is not None:
                pass

    def waiting(self) -> list[bytes]:
        return [delivery.body for delivery in self._buffer]

    def ack(self, tag: Any, *, multiple: bool = False, flush: bool = True) -> None:
        self.ack_many([tag], flush=flush)

    def ack_many(self, tags: list[Any], *, flush: bool = True) -> None:
        """DELETE the rows (those ack_within deleted already: nothing); flush=False
        sends it with the next claim (or keepalive, close, past the prefetch)."""
        for tag in tags:
            if tag in self.acked_in_transaction:
                self.acked_in_transaction.discard(tag)  # deleted with the handler's commit
            else:
                self._deferred.append(tag)
        if flush or len(self._deferred) > self.prefetch:
            self.flush_acks()

    def flush_acks(self) -> None:
        if self._deferred:
            try:
                with self._lock:
                    self._flush()
            except ERRORS as error:
                raise translated("ack", error) from None

    @contextlib.contextmanager
    def ack_within(self, deliveries: list[Delivery], *, using: str) -> Iterator[None]:
        """While inside: the next transaction committed on the database `using`
        (this thread's connection: the handler's) deletes these rows just
        before its COMMIT, when `using` is the queue's database. The ack the
        handler sends after its commit then has nothing left to do."""
        if using != self.using or not deliveries:
            yield
            return
        tags = [delivery.tag for delivery in deliveries]
        delete = f"DELETE FROM {TABLE} WHERE id IN ({in_list(len(tags))})"
        db = connections[using]
        # Only a commit that wrote something is the handler's (a read-only one, e.g. a task
        # that opted out of the transaction reading its row, waits for the next).
        changes = db.connection.total_changes if self.vendor == "sqlite" and db.connection is not None else -1

        def delete_with_the_commit() -> bool:
            if self.vendor == "sqlite":
                if db.connection.total_changes <= changes:
                    return False
                sql.execute(delete, tags, using=using, fetch=False)
            elif (
                not sql.execute(f"{delete} AND txid_current_if_assigned() IS NOT NULL RETURNING id", tags, using=using)
                and sql.execute("SELECT txid_current_if_assigned() IS NULL", [], using=using)[0][0]
            ):
                return False  # nothing written yet (else: the rows were gone already)
            self.acked_in_transaction.update(tags)
            self._held.difference_update(tags)
            return True

        forget = sql.before_commit(delete_with_the_commit, using=using)
        try:
            yield
        finally:
            forget()

    def requeue(self, tag: Any) -> None:
        """Hand the delivery back: ready again at once, counted (its claim counted it)."""
        try:
            with self._lock:
                self.acked_in_transaction.discard(tag)
                self._release([tag])
        except ERRORS as error:
            raise translated("requeue", error) from None

    def stop_consuming(self) -> None:
        self.flush_acks()

    def keepalive(self, seconds: float = 0) -> None:
        self.flush_acks()
        time.sleep(seconds)  # the keeper thread renews the leases

    def keep_holding(self, wait: float) -> bool:
        """One turn of the keeper thread: renew the lease of every row this
        consumer holds. False once closed."""
        if self._stopped.is_set():
            return False
        if not self._held or not self._lock.acquire(timeout=wait):
            return True
        try:
            if not self._stopped.is_set():
                lease = conf.NIGHTJAR_CLAIM_IDLE_SECONDS
                self._run(self._renew_sql, [lease, self.queue, self.dead, self.claimer], rows=False)
        finally:
            self._lock.release()
        return True

    def close(self) -> None:
        """Send deferred acks; what is held goes back (what was never handed out, uncounted)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        with contextlib.suppress(*ERRORS, BrokerError), self._lock:
            self._flush()
            unhanded = [delivery.tag for delivery in self._buffer]
            self._buffer.clear()
            self._release(unhanded, uncount=True)
            self._release(sorted(self._held))
        self._close_connections()

    def _close_connections(self) -> None:
        with self._lock:
            own, listen, self._own, self._listen = self._own, self._listen, None, None
            if own is not None and own.connection is not None:
                with contextlib.suppress(*ERRORS):
                    own.connection.close()
                own.connection = None
            if listen is not None:
                with contextlib.suppress(*ERRORS):
                    listen.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._stopped.set()
            self._close_connections()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _keep_holding(consumer_ref, every: float) -> None:
    """The keeper thread of a Consumer (held weakly). A failed renewal is
    tried again at the next turn; the worker's own calls report a database
    that is gone."""
    background_thread()
    stopped = consumer_ref()._stopped
    while not stopped.wait(every):
        consumer = consumer_ref()
        try:
            if consumer is None or not consumer.keep_holding(every):
                return
        except ERRORS as error:
            logger.info("Could not renew the leases of the rows this worker holds: %s", error)
        finally:
            del consumer


# -- counts and tools, on this thread's Django connection --


_T = TypeVar("_T")


def short_call(action: str, function: Callable[[str], _T]) -> _T:
    try:
        return function(alias())
    except ERRORS as error:
        raise translated(action, error) from None


def queue_counts(queue: str) -> dict[str, Any]:
    """Ready rows, held ones (unacked), the dead letters; consumers: on
    PostgreSQL the worker connections open now, on SQLite the workers holding rows."""
    dead = dead_letter_queue_name(queue)

    def count(using: str) -> dict[str, Any]:
        now = NOW[vendor(using)]
        ((ready, unacked, dead_count, holders),) = sql.execute(
            f"SELECT COALESCE(SUM(CASE WHEN queue = %s AND (lease_until IS NULL OR lease_until < {now}) THEN 1 ELSE 0 END), 0),"
            f" COALESCE(SUM(CASE WHEN queue = %s AND lease_until >= {now} THEN 1 ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN queue = %s THEN 1 ELSE 0 END), 0),"
            f" COUNT(DISTINCT CASE WHEN queue = %s AND lease_until >= {now} THEN claimed_by END)"
            f" FROM {TABLE} WHERE queue IN (%s, %s)",
            [queue, queue, dead, queue, queue, dead],
            using=using,
        )
        consumers = holders
        if vendor(using) == "postgresql":
            ((consumers,),) = sql.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                [worker_application_name(queue)],
                using=using,
            )
        return {
            "ready": int(ready),
            "unacked": int(unacked),
            "unacked_error": "",
            "consumers": int(consumers),
            "dead": int(dead_count),
            "length": int(ready) + int(unacked),
        }

    return short_call("queue status", count)


def ping() -> None:
    short_call("health check", lambda using: sql.execute("SELECT 1", [], using=using))


def purge_queues(queue: str | None = None) -> None:
    queue = queue or queue_name()
    short_call(
        "purge",
        lambda using: sql.execute(
            f"DELETE FROM {TABLE} WHERE queue IN (%s, %s)",
            [queue, dead_letter_queue_name(queue)],
            using=using,
            fetch=False,
        ),
    )


def delete_queues(queue: str | None = None) -> None:
    purge_queues(queue)


def publish_raw(bodies: list[bytes], *, dead: bool = False, queue: str | None = None) -> None:
    queue = queue or queue_name()
    insert(list(bodies), queue=dead_letter_queue_name(queue) if dead else queue)
