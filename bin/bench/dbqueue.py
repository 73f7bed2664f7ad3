"""The database transport (db://default) in the benchmark: the raw ceiling (a
plain SKIP LOCKED loop with psycopg, or its sqlite3 twin, doing the ticket
worker's work per delivery), Nightjar's ticket worker on the transport, and
the pick-up latency of an idle consumer. SQLite (the benchmark's database),
then the same on a PostgreSQL cluster of its own."""

import secrets
import statistics
import threading
import time
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection

from bench import sections as s
from nightjar_delivery import sql, transport
from nightjar_delivery.transport import database
from tickets import contract
from tickets.models import Registration

DB_URL = "db://default"


def prepare(n: int) -> None:
    """N registrations and one message row each on the benchmark's queue."""
    s.reset_database()
    queue = transport.queue_name()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {database.TABLE}")
    Registration.objects.bulk_create([Registration(name=f"Bench Guest {i % 500}") for i in range(n)], batch_size=2000)
    bodies = [
        contract.encode(registration_id=pk, name=name)
        for pk, name in Registration.objects.order_by("pk").values_list("pk", "name")
    ]
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {database.TABLE} (queue, body, message_id, created, deliveries, claimed_by)"
            " VALUES (%s, %s, '', 0, 0, '')",
            [(queue, body) for body in bodies],
        )


def raw_skip_locked(n: int, prefetch: int = 10) -> float:
    """One process: claim the oldest ready rows, as many as the worker's
    prefetch (UPDATE ... RETURNING; FOR UPDATE SKIP LOCKED on PostgreSQL) in
    autocommit, then per row one transaction: the completion key, the ticket
    if the key is new, the row's DELETE; COMMIT."""
    db, mark, begin = s.dbapi()
    pg = connection.vendor == "postgresql"
    now_sql = database.NOW[connection.vendor]
    claim = (
        f"UPDATE {database.TABLE} SET claimed_by = 'raw', holder = 0, lease_until = {now_sql} + 60,"
        f" deliveries = deliveries + 1 WHERE id IN (SELECT id FROM {database.TABLE} WHERE queue = {mark}"
        f" AND (lease_until IS NULL OR lease_until < {now_sql}) ORDER BY id LIMIT {prefetch}"
        f"{' FOR UPDATE SKIP LOCKED' if pg else ''}) RETURNING id, body"
    )
    key = (
        f"INSERT INTO tickets_completion (registration_id, completed) VALUES ({mark}, {mark})"
        " ON CONFLICT (registration_id) DO NOTHING RETURNING registration_id"
    )
    ticket = (
        f"INSERT INTO tickets_ticket (registration_id, name, issued, secret) VALUES ({mark}, {mark}, {mark}, {mark})"
    )
    delete = f"DELETE FROM {database.TABLE} WHERE id = {mark}"
    queue = transport.queue_name()
    cursor = db.cursor()
    done, first, last = 0, 0.0, 0.0
    while done < n:
        cursor.execute(claim, [queue])
        rows = sorted(cursor.fetchall())
        if not rows:
            break
        if not first:
            first = time.perf_counter()
        for tag, body in rows:
            message = contract.decode(bytes(body))
            now = datetime.now(UTC).replace(tzinfo=None)
            cursor.execute(begin)
            cursor.execute(key, [message.registration_id, now])
            if cursor.fetchall():
                cursor.execute(ticket, [message.registration_id, message.name, now, secrets.token_urlsafe(32)])
            cursor.execute(delete, [tag])
            cursor.execute("COMMIT")
            done += 1
            last = time.perf_counter()
    db.close()
    assert done == n, f"the raw loop handled {done} of {n}"
    return (n - 1) / (last - first)


def publish_as_another_process(body: bytes) -> None:
    """transport.publish's INSERT (and NOTIFY), without the in-process wake-up
    an idle SQLite consumer of the same process gets: the poll finds it."""
    if connection.vendor == "postgresql":
        transport.publish(body, message_id="", queue=transport.queue_name())
        return
    sql.execute(
        f"INSERT INTO {database.TABLE} (queue, body, message_id, created, deliveries, claimed_by)"
        f" VALUES (%s, %s, '', {database.NOW['sqlite']}, 0, '')",
        [transport.queue_name(), body],
        fetch=False,
    )


def pickup_latency(count: int, gap: float) -> list[float]:
    """An idle consumer (its own thread, consume() as the worker calls it):
    milliseconds from the publish call to consume() yielding the message,
    one message at a time, `gap` seconds apart (idle in between); published
    as by another process (SQLite: found by the poll)."""
    settings.NIGHTJAR_BROKER_URL = DB_URL
    consumer = transport.Consumer(queue=transport.queue_name())
    arrived: dict[bytes, float] = {}
    stop = threading.Event()

    def consume() -> None:
        for delivery in consumer.consume(idle_seconds=0.5):
            if delivery is not None:
                arrived[delivery.body] = time.perf_counter()
                consumer.ack(delivery.tag)
            if stop.is_set():
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(1.0)  # idle: the SQLite poll at its longest
    sent: dict[bytes, float] = {}
    for i in range(count):
        body = f"latency {i}".encode()
        sent[body] = time.perf_counter()
        publish_as_another_process(body)
        time.sleep(gap)
    deadline = time.monotonic() + 10
    while len(arrived) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=5)
    consumer.close()
    return [(arrived[body] - sent[body]) * 1000 for body in sent if body in arrived]


def bench_dbqueue(n: int, quick: bool) -> None:
    library = s.DATABASE_LIBRARY
    s.say(f"The database transport ({DB_URL}, {library}, {n} deliveries, per delivery, 1 process)")
    raw, worker = [], []
    for _ in range(s.RUNS):
        prepare(n)
        raw.append(raw_skip_locked(n))
        worker.append(s.nightjar_rate_on(n, prepare, env=s.worker_env(NIGHTJAR_BROKER_URL=DB_URL)))
    s.record("dbq_raw_per_delivery", f"raw SKIP LOCKED loop ({library}), per delivery (claims 10)", raw, "deliveries/s")
    figure = s.record(
        "dbq_worker_per_delivery", "Nightjar's worker on db://default, per delivery", worker, "deliveries/s"
    )
    s.compare(figure, "dbq_raw_per_delivery")
    latencies = pickup_latency(40 if quick else 200, 0.05)
    quantiles = statistics.quantiles(latencies, n=100)
    s.RESULTS["dbq_pickup_ms"] = {
        "label": "pick-up latency of an idle consumer (publish -> consume() yields)",
        "unit": "ms",
        "p50": quantiles[49],
        "p99": quantiles[98],
        "max": max(latencies),
        "count": len(latencies),
    }
    s.say(
        f"  pick-up latency, idle consumer: p50 {quantiles[49]:.1f} ms, p99 {quantiles[98]:.1f} ms,"
        f" max {max(latencies):.1f} ms ({len(latencies)} messages)"
    )
