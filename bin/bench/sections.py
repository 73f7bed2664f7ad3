"""The benchmark's sections: what each measures, and the helpers they share.
Imported only after django.setup() (bin/bench/__main__.py does that inside
its stack); configure() names the scratch folder and the runs per figure."""

import asyncio
import contextlib
import io
import json
import os
import secrets
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pika
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.models import Max, Min

from bench import stack
from devtools import web
from devtools.ports import free_port
from nightjar_delivery import transport
from nightjar_delivery.transport import amqp
from tickets import contract
from tickets.models import (
    Completion,
    DeliveryFailure,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    StaffAction,
    Ticket,
)
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import register_guest

ROOT = stack.ROOT
PYTHON = sys.executable
RUNS = 3
RESULTS: dict[str, dict] = {}
FOLDER = Path("/nonexistent")  # set by configure()
DATABASE_LIBRARY = "sqlite3" if connection.vendor == "sqlite" else "psycopg"


# Another checkout whose worker the pairs also run, right after this one's
# (--before TREE): a change's before and after measured in one run.
BEFORE: Path | None = None


def configure(folder: Path, runs: int, before: Path | None = None) -> None:
    """Where the sections write (the scratch folder), how many runs make a
    figure, and the checkout to compare the worker with (none by default)."""
    global FOLDER, RUNS, BEFORE
    FOLDER, RUNS, BEFORE = folder, runs, before


def say(line: str) -> None:
    print(line, flush=True)


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def record(key: str, label: str, values: list[float], unit: str, **extra) -> dict:
    RESULTS[key] = {"label": label, "unit": unit, **summary(values), **extra}
    figure = RESULTS[key]
    say(f"  {label}: {figure['median']:,.0f} {unit} (min {figure['min']:,.0f}, max {figure['max']:,.0f})")
    return figure


def reset_database() -> None:
    """Empty the tables a run writes, in plain SQL: the ORM's delete() reads
    every row first to honour PROTECT, slow for 20,000 on PostgreSQL."""
    children = (ParkedDelivery, DeliveryFailure, StaffAction, Redelivery, Ticket, Completion, RejectedMessage)
    tables = [model._meta.db_table for model in (*children, Registration)] + [LEAN_TICKET, LEAN_COMPLETION]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for table in tables:  # children first
                cursor.execute(f"DELETE FROM {table}")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            # CASCADE: other apps' rows that point at tickets (the door's) go too.
            cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


def prepare(n: int) -> None:
    """N registrations in the database and one delivery each in the queue (or stream)."""
    reset_database()
    Registration.objects.bulk_create([Registration(name=f"Bench Guest {i % 500}") for i in range(n)], batch_size=2000)
    bodies = [
        contract.encode(registration_id=pk, name=name)
        for pk, name in Registration.objects.order_by("pk").values_list("pk", "name")
    ]
    if transport.kind() == "redis_streams":
        publish_bulk_redis(bodies)
    else:
        publish_bulk(bodies)


def publish_bulk_redis(bodies: list[bytes]) -> None:
    import redis

    client = redis.Redis.from_url(settings.NIGHTJAR_BROKER_URL)
    client.delete(transport.queue_name())
    client.xgroup_create(transport.queue_name(), "nightjar", id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for body in bodies:
        pipe.xadd(transport.queue_name(), {"body": body})
    pipe.execute()
    client.close()


def publish_bulk(bodies: list[bytes]) -> None:
    connection_ = pika.BlockingConnection(amqp.parameters())
    channel = connection_.channel()
    amqp.declare(channel)
    channel.queue_purge(transport.queue_name())
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    for body in bodies:
        channel.basic_publish("", transport.queue_name(), body, props)
    deadline = time.monotonic() + 120
    while channel.queue_declare(transport.queue_name(), passive=True).method.message_count < len(bodies):
        assert time.monotonic() < deadline, "RabbitMQ did not take the messages in time"
        connection_.sleep(0.05)
    connection_.close()


def ticket_span() -> tuple[int, float]:
    """Tickets made and the seconds between the first and the last commit."""
    span = Ticket.objects.aggregate(first=Min("issued"), last=Max("issued"))
    count = Ticket.objects.count()
    return count, (span["last"] - span["first"]).total_seconds()


def wait_for_tickets(n: int, procs: list[subprocess.Popen], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while Ticket.objects.count() < n:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"A worker exited with {proc.returncode}; see the logs in {FOLDER}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Only {Ticket.objects.count()} of {n} tickets after {timeout} s")
        time.sleep(0.05)


def worker_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def start_workers(
    count: int, *args: str, env: dict[str, str] | None = None, root: Path = ROOT
) -> list[subprocess.Popen]:
    """Workers in service mode (this checkout's, or root's); their output goes
    to a file, as under a service manager."""
    command = [PYTHON, str(root / "manage.py"), "worker", "--serve", *args]
    procs = []
    for _ in range(count):
        with open(FOLDER / f"worker-{uuid.uuid4().hex[:6]}.log", "w") as log:
            procs.append(subprocess.Popen(command, env=env or worker_env(), stdout=log, stderr=subprocess.STDOUT))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    stack.stop_all(procs)


# --- 1. Raw ceiling -------------------------------------------------------


# The lean raw ceiling writes to tables without the foreign key, the index and
# the secret, so readers see what the schema itself costs.
LEAN_COMPLETION, LEAN_TICKET = "bench_lean_completion", "bench_lean_ticket"


def create_lean_tables() -> None:
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT" if connection.vendor == "sqlite" else "BIGSERIAL PRIMARY KEY"
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {LEAN_COMPLETION} (registration_id BIGINT PRIMARY KEY, completed TIMESTAMP)"
        )
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {LEAN_TICKET} (id {serial}, registration_id BIGINT, name VARCHAR(300), issued TIMESTAMP)"
        )


def dbapi(*, django: bool = False):
    """A plain DB-API connection to the benchmark's database (sqlite3, or
    psycopg on PostgreSQL), in autocommit, its parameter mark and its BEGIN;
    django: the one beneath Django's own connection (in autocommit, set up by
    the settings as the plain one is), for statements in the same
    transaction as code that uses Django's cursor (the caller leaves it open)."""
    if django:
        connection.ensure_connection()
        return connection.connection, ("?" if connection.vendor == "sqlite" else "%s"), dbapi_begin()
    if connection.vendor == "sqlite":
        db = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None, timeout=20)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db, "?", dbapi_begin()
    import psycopg

    params = settings.DATABASES["default"]
    db = psycopg.connect(
        host=params["HOST"],
        port=params["PORT"],
        user=params["USER"],
        password=params["PASSWORD"],
        dbname=params["NAME"],
        autocommit=True,
    )
    return db, "%s", dbapi_begin()


def dbapi_begin() -> str:
    return "BEGIN IMMEDIATE" if connection.vendor == "sqlite" else "BEGIN"


def raw_database(*, lean: bool = False, batch: bool = False):
    """A plain DB-API connection (sqlite3, or psycopg on PostgreSQL) and a
    commit(tags_bodies) that writes the keys and tickets for those bodies in
    one transaction, as the worker does: INSERT ... ON CONFLICT DO NOTHING
    RETURNING for the keys, then the tickets of the new ones, one multi-row
    statement each; on PostgreSQL, as the worker there (tickets/models.py),
    with array parameters, and in batches (batch) the tickets' INSERT sent
    with the COMMIT (tickets/batch.py)."""
    completion, ticket = (LEAN_COMPLETION, LEAN_TICKET) if lean else ("tickets_completion", "tickets_ticket")
    db, mark, begin = dbapi()
    pg = connection.vendor == "postgresql"

    def commit(tags_bodies):
        now = datetime.now(UTC).replace(tzinfo=None)
        rows = {}
        for _tag, body in tags_bodies:
            data = json.loads(body)
            rows[int(data["id"][2:])] = data["name"]
        ids = sorted(rows)
        cursor = db.cursor()
        cursor.execute(begin)
        if pg:
            keys, values = "SELECT unnest(%s::bigint[]), %s", [ids, now]
        else:
            keys, values = "VALUES " + ", ".join([f"({mark}, {mark})"] * len(ids)), [v for pk in ids for v in (pk, now)]
        cursor.execute(
            f"INSERT INTO {completion} (registration_id, completed) {keys} "
            "ON CONFLICT (registration_id) DO NOTHING RETURNING registration_id",
            values,
        )
        new = sorted(row[0] for row in cursor.fetchall())
        if not new:
            cursor.execute("COMMIT")
            return
        columns = "(registration_id, name, issued)" if lean else "(registration_id, name, issued, secret)"
        secrets_ = [] if lean else [secrets.token_urlsafe(32) for _ in new]
        if pg:
            arrays = "%s::bigint[], %s::text[]" + ("" if lean else ", %s::text[]")
            named = "pk, name" + ("" if lean else ", secret")
            statement = (
                f"INSERT INTO {ticket} {columns} SELECT pk, name, %s{'' if lean else ', secret'} "
                f"FROM unnest({arrays}) AS row ({named})"
            )
            values = [now, new, [rows[pk] for pk in new], *([] if lean else [secrets_])]
        else:
            per_row = "(" + ", ".join([mark] * (3 if lean else 4)) + ")"
            statement = f"INSERT INTO {ticket} {columns} VALUES " + ", ".join([per_row] * len(new))
            values = [v for i, pk in enumerate(new) for v in (pk, rows[pk], now, *([] if lean else [secrets_[i]]))]
        if pg and batch:
            with db.pipeline():
                cursor.execute(statement, values)
                cursor.execute("COMMIT")
            return
        cursor.execute(statement, values)
        cursor.execute("COMMIT")

    return db, commit


def raw_consumer(n: int, batch: int, prefetch: int, *, lean: bool = False) -> float:
    """Plain pika + sqlite3 (or psycopg) on the same schema, broker and disk,
    with the prefetch of the worker it is compared with."""
    db, commit = raw_database(lean=lean, batch=batch > 1)
    conn = pika.BlockingConnection(amqp.parameters())
    channel = conn.channel()
    channel.basic_qos(prefetch_count=prefetch)
    done = 0
    pending: list[tuple[int, bytes]] = []
    first = last = 0.0

    for method, _props, body in channel.consume(transport.queue_name(), inactivity_timeout=2):
        if method is None:
            break
        if not first:
            first = time.perf_counter()
        pending.append((method.delivery_tag, body))
        if len(pending) >= batch:
            commit(pending)
            channel.basic_ack(pending[-1][0], multiple=batch > 1)
            done += len(pending)
            pending = []
            last = time.perf_counter()
        if done >= n:
            break
    if pending:
        commit(pending)
        channel.basic_ack(pending[-1][0], multiple=True)
        done += len(pending)
        last = time.perf_counter()
    channel.cancel()
    conn.close()
    db.close()
    assert done == n, f"raw consumer handled {done} of {n}"
    return (n - 1) / (last - first)


def bench_raw(n: int) -> None:
    say(f"Raw ceiling (pika + {DATABASE_LIBRARY}, {n} deliveries; the prefetch of the worker each is compared with)")
    for batch, prefetch, lean, key, label in (
        (1, 50, False, "raw_per_delivery", "raw, per delivery (prefetch 50)"),
        (50, 100, False, "raw_batch50", "raw, batches of 50 (prefetch 100)"),
        (1, 50, True, "raw_lean_per_delivery", "raw lean (no foreign key, index or secret), per delivery"),
        (50, 100, True, "raw_lean_batch50", "raw lean, batches of 50"),
    ):
        values = []
        for _ in range(RUNS):
            prepare(n)
            values.append(raw_consumer(n, batch, prefetch, lean=lean))
        record(key, label, values, "deliveries/s")


# --- 2 and 3. Nightjar's worker --------------------------------------------


def nightjar_rate(n: int, processes: int, *args: str, env: dict[str, str] | None = None, root: Path = ROOT) -> float:
    return nightjar_rate_on(n, prepare, processes, *args, env=env, root=root)


def nightjar_rate_on(
    n: int, prepared, processes: int = 1, *args: str, env: dict[str, str] | None = None, root: Path = ROOT
) -> float:
    """The worker's rate on n deliveries that prepared(n) puts in its queue."""
    prepared(n)
    procs = start_workers(processes, *args, env=env, root=root)
    try:
        wait_for_tickets(n, procs)
    finally:
        stop(procs)
    count, seconds = ticket_span()
    assert count == n, f"{count} tickets for {n} registrations"
    return (n - 1) / seconds


def compare(figure: dict, *raws: str) -> None:
    """The worker's median as a ratio of each raw ceiling measured in this run."""
    for raw in raws:
        if raw in RESULTS:
            figure[f"ratio_to_{raw}"] = ratio = figure["median"] / RESULTS[raw]["median"]
            say(f"    = {ratio:.0%} of {RESULTS[raw]['label']}")


def bench_worker(n: int, processes_list: tuple[int, ...]) -> None:
    say(f"Nightjar worker, per-delivery mode (--serve --prefetch 50, {n} deliveries)")
    for processes in processes_list:
        values = [nightjar_rate(n, processes, "--prefetch", "50") for _ in range(RUNS)]
        figure = record(f"worker_{processes}proc", f"worker, {processes} process(es)", values, "deliveries/s")
        compare(figure, "raw_per_delivery", "raw_lean_per_delivery")


def bench_batch(n: int, processes_list: tuple[int, ...]) -> None:
    say(f"Nightjar worker, batch mode (--serve --batch 50 --prefetch 100, {n} deliveries)")
    for processes in processes_list:
        values = [nightjar_rate(n, processes, "--batch", "50", "--prefetch", "100") for _ in range(RUNS)]
        figure = record(f"batch_{processes}proc", f"batch worker, {processes} process(es)", values, "deliveries/s")
        compare(figure, "raw_batch50", "raw_lean_batch50")


def bench_desk(n: int) -> None:
    """The desk's cost to the worker. Reports: the same worker with
    NIGHTJAR_WORKER_REPORT_SECONDS=0 and with the default 5 s (plus every
    0.5 s, ten times as often), runs interleaved so drift hits all alike;
    metrics: the worker serving --metrics-port, scraped every second. The
    metric calls themselves are timed in-process, per delivery."""
    import threading
    import urllib.request

    from nightjar_delivery.worker import Worker

    say(f"The desk's cost (per-delivery worker, --prefetch 50, {n} deliveries)")
    port = free_port()
    stop_scraping = threading.Event()

    def scrape() -> None:
        while not stop_scraping.wait(1.0):
            with contextlib.suppress(OSError):  # between runs nobody listens
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    variants = {
        "desk_reports_off": ("worker, reports off", worker_env(NIGHTJAR_WORKER_REPORT_SECONDS="0"), ()),
        "desk_reports_5s": ("worker, reports every 5 s (default)", worker_env(), ()),
        "desk_reports_05s": ("worker, reports every 0.5 s", worker_env(NIGHTJAR_WORKER_REPORT_SECONDS="0.5"), ()),
        "desk_metrics": (
            "worker, reports every 5 s, --metrics-port scraped every 1 s",
            worker_env(),
            ("--metrics-port", str(port)),
        ),
    }
    values: dict[str, list[float]] = {key: [] for key in variants}
    try:
        for _ in range(RUNS):
            for key, (_, env, args) in variants.items():
                values[key].append(nightjar_rate(n, 1, "--prefetch", "50", *args, env=env))
    finally:
        stop_scraping.set()
    for key, (label, _, _) in variants.items():
        figure = record(key, label, values[key], "deliveries/s")
        if key != "desk_reports_off":
            compare(figure, "desk_reports_off")
    # What the worker's report measures for one delivery, timed on its own.
    worker = Worker(handler=None, stdout=io.StringIO())
    created = time.time() - 0.05
    calls = 100_000
    started = time.perf_counter()
    for _ in range(calls):
        worker.report.measure(time.perf_counter(), handled=1, made=[created])
    micros = (time.perf_counter() - started) / calls * 1e6
    per_delivery = 1e6 / RESULTS["desk_reports_off"]["median"]
    RESULTS["desk_metric_calls"] = {
        "label": "metric calls per delivery",
        "unit": "µs",
        "median": micros,
        "share_of_a_delivery": micros / per_delivery,
    }
    say(
        f"  metric calls per delivery: {micros:.1f} µs = {micros / per_delivery:.1%} of a delivery ({per_delivery:.0f} µs)"
    )


# --- 4. End-to-end latency ---------------------------------------------------


def ticket_latencies(rate: float, seconds: float, env: dict[str, str] | None = None) -> list[float]:
    """One worker in service mode (on the broker env names, else the
    benchmark's) while this process registers guests at `rate` a second, each
    in its own transaction, published as the site does (publish_on_commit):
    milliseconds from each registration's row to its ticket's (the handler's
    INSERT), sorted. The database is emptied first."""
    reset_database()
    procs = start_workers(1, "--prefetch", "50", env=env)
    time.sleep(2)  # let the worker connect before the clock starts
    count = int(rate * seconds)
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        register_guest(name=f"Latency Guest {i}")
    wait_for_tickets(count, procs)
    stop(procs)
    return sorted(
        (ticket.issued - ticket.registration.created).total_seconds() * 1000
        for ticket in Ticket.objects.select_related("registration")
    )


def bench_latency(rate: float, seconds: float) -> None:

    say(f"End-to-end latency ({rate:.0f} registrations/s for {seconds:.0f} s, one worker in service mode)")
    p50s, p95s, p99s = [], [], []
    for _ in range(RUNS):
        publish_bulk([])
        latencies = ticket_latencies(rate, seconds)
        p50s.append(latencies[len(latencies) // 2])
        p95s.append(latencies[int(len(latencies) * 0.95)])
        p99s.append(latencies[int(len(latencies) * 0.99)])
    record("latency_p50_ms", "latency p50", p50s, "ms")
    record("latency_p95_ms", "latency p95", p95s, "ms")
    record("latency_p99_ms", "latency p99", p99s, "ms")


# --- 5. Web path -----------------------------------------------------------------


async def post_at_rate(port: int, rate: float, seconds: float, cookie: str, token: str) -> tuple[list[float], int]:
    """Open-loop load: request i is due at i/rate; its latency counts from then,
    so a slow server cannot hide queueing (no coordinated omission)."""
    count = int(rate * seconds)
    latencies: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1

    async def one(i: int) -> None:
        nonlocal errors
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        due = start + i / rate
        body = f"csrfmiddlewaretoken={token}&name=Web+Guest+{i}&submission_key={uuid.uuid4().hex}".encode()
        request = (
            f"POST /evening/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: csrftoken={cookie}\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode() + body
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            status = await reader.readline()
            writer.close()
            if b" 302 " not in status:
                errors += 1
        except OSError:
            errors += 1
        latencies.append((loop.time() - due) * 1000)

    await asyncio.gather(*(one(i) for i in range(count)))
    return sorted(latencies), errors


def start_gunicorn(port: int, broker_url: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "NIGHTJAR_BROKER_URL": broker_url,
        # Debug off: the site starts only on a real key (nightjar/keys.py).
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "DJANGO_SECURE_COOKIES": "0",
        "NIGHTJAR_REGISTRATIONS_PER_MINUTE": "0",
    }
    log = FOLDER / f"gunicorn-{port}.log"
    with open(log, "w") as output:
        try:
            proc, _ = web.start_gunicorn(
                env,
                *("-c", str(ROOT / "gunicorn.conf.py"), "--access-logfile", "/dev/null"),
                port=port,
                ready_path="/",
                stderr=output,
            )
        except web.GunicornDidNotStart:
            raise RuntimeError(f"gunicorn did not start:\n{log.read_text()[-3000:]}") from None
    return proc


def csrf_pair(port: int) -> tuple[str, str]:
    import re
    import urllib.request

    response = urllib.request.urlopen(f"http://127.0.0.1:{port}/evening/")
    page = response.read().decode()
    cookie = response.headers["Set-Cookie"].split("csrftoken=")[1].split(";")[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return cookie, token


def full_evening(full: bool) -> None:
    """A full evening (one seat, taken): every registration waits, the
    waiting-list path (the evening's row lock, a count, no publish); else
    room for everyone, the normal path."""
    from tickets.services import seats

    if full:
        Registration.objects.create(name="Seat Holder")
    seats.set_capacity(capacity=1 if full else None, actor="benchmark")


def bench_web(rates: list[int], seconds: float, *, key: str = "web") -> None:
    """The broker the settings name up, then the same on a full evening (every
    registration waits), then a port where nothing listens."""
    broker, up_url = transport.name(), settings.NIGHTJAR_BROKER_URL
    down_url = f"redis://127.0.0.1:{free_port()}/0" if transport.kind() == "redis_streams" else None
    down_url = down_url or f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    for label, url in (("up", up_url), ("full", up_url), ("down", down_url)):
        shown = f"{broker} up, a full evening (the waiting list)" if label == "full" else f"{broker} {label}"
        say(f"Web path, {shown} (gunicorn, POST /evening/, {seconds:.0f} s per rate)")
        held_runs = []
        table = {}
        for _ in range(RUNS):
            prepare(0)  # an empty database and queue, as in steady state
            full_evening(label == "full")
            # A worker drains the queue as in production (its CPU counts too). In
            # batch mode it takes SQLite's write lock once per batch instead of
            # once per delivery, which is what keeps the web's p99 low.
            workers = start_workers(1, "--batch", "50") if label != "down" else []
            port = free_port()
            proc = start_gunicorn(port, url)
            try:
                cookie, token = csrf_pair(port)
                # Warm up: every gunicorn worker opens its database and RabbitMQ
                # connections on its first requests; those are not the steady state.
                asyncio.run(post_at_rate(port, 50, 3, cookie, token))
                # Every rate of the ladder, whatever the one before did: one stall at a
                # low rate must not hide that a higher one holds (issue 43).
                held = 0
                for rate in rates:
                    latencies, errors = asyncio.run(post_at_rate(port, rate, seconds, cookie, token))
                    p99 = latencies[int(len(latencies) * 0.99)]
                    table.setdefault(rate, []).append(p99)
                    failed = p99 >= 50 or errors
                    say(
                        f"    {rate}/s: p50 {latencies[len(latencies) // 2]:.1f} ms, p99 {p99:.1f} ms, errors {errors}"
                        + ("  (not held)" if failed else "")
                    )
                    if not failed:
                        held = rate
            finally:
                proc.terminate()
                proc.wait(timeout=30)
                stop(workers)
            held_runs.append(held)
        record(f"{key}_{label}_held_rate", f"highest rate held with p99 < 50 ms, {shown}", held_runs, "req/s")
        RESULTS[f"{key}_{label}_held_rate"]["p99_ms_by_rate"] = table


# --- 6. Memory ---------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def bench_memory(first: int, total: int) -> None:
    say(f"Worker memory (resident set) after {first:,} and {total:,} deliveries")
    prepare(total)
    # One worker drains them all; its RSS is sampled as the ticket count passes each mark.
    procs = start_workers(1, "--prefetch", "50")
    samples = {}
    try:
        for mark in (first, total):
            while Ticket.objects.count() < mark:
                time.sleep(0.02)
            samples[mark] = rss_kib(procs[0].pid)
    finally:
        stop(procs)
    growth = samples[total] / samples[first] - 1
    RESULTS["memory"] = {
        "label": "worker RSS",
        "unit": "KiB",
        f"after_{first}": samples[first],
        f"after_{total}": samples[total],
        "growth": growth,
    }
    say(f"  RSS after {first:,}: {samples[first]:,} KiB; after {total:,}: {samples[total]:,} KiB ({growth:+.1%})")


def bench_backlog(n: int) -> None:
    """An outage left n registrations unpublished: how long one reconcile
    (default --limit 100, passes repeating while full) takes to publish them
    all, each publish waiting for its confirm."""
    say(f"Backlog: reconcile republishing {n:,} registrations")
    seconds = []
    for _ in range(RUNS):
        reset_database()
        with amqp.short_channel("purge") as channel:
            amqp.declare(channel)
            channel.queue_purge(transport.queue_name())
        old = datetime.now(UTC).replace(year=2000)
        Registration.objects.bulk_create(
            [Registration(name=f"Backlog {i}", created=old) for i in range(n)], batch_size=2000
        )
        started = time.monotonic()
        report = reconcile_registrations()
        seconds.append(time.monotonic() - started)
        assert len(report.published) == n and report.remaining == 0, (len(report.published), report.remaining)
    figure = record("backlog", f"{n:,} republished by one reconcile", seconds, "s")
    # Before: one pass of 100 per run, so a worker with --reconcile-every 30 took n / 100 intervals.
    figure["one_pass_per_30s_seconds"] = n / 100 * 30
    say(f"  (one pass of 100 every 30 s, as before: {n / 100 * 30 / 60:,.0f} min)")


def raw_redis_consumer(n: int, batch: int, *, ack_with_read: bool = False, lean: bool = False) -> float:
    """Plain redis-py + sqlite3: XREADGROUP COUNT 50, a transaction per entry
    (or per 50), XACK after the commit; with ack_with_read, the XACK of what
    was committed goes out in one pipeline with the next read (as the worker
    does in service mode) instead of one round trip per transaction."""
    import redis

    db, commit = raw_database(lean=lean)
    client = redis.Redis.from_url(settings.NIGHTJAR_BROKER_URL)
    stream = transport.queue_name()
    done, first, last, unsent = 0, 0.0, 0.0, []
    while done < n:
        pipe = client.pipeline(transaction=False)
        if unsent:
            pipe.xack(stream, "nightjar", *unsent)
            unsent = []
        pipe.xreadgroup("nightjar", "raw", {stream: ">"}, count=50, block=2000)
        reply = pipe.execute()[-1]
        if not reply:
            break
        entries = [(entry_id, fields[b"body"]) for entry_id, fields in reply[0][1]]
        if not first:
            first = time.perf_counter()
        for start in range(0, len(entries), batch):
            chunk = entries[start : start + batch]
            commit(chunk)
            if ack_with_read:
                unsent += [entry_id for entry_id, _ in chunk]
            else:
                client.xack(stream, "nightjar", *[entry_id for entry_id, _ in chunk])
            done += len(chunk)
        last = time.perf_counter()
    if unsent:
        client.xack(stream, "nightjar", *unsent)
    client.close()
    db.close()
    assert done == n, f"raw redis consumer handled {done} of {n}"
    return (n - 1) / (last - first)


@contextlib.contextmanager
def redis_server(name: str):
    """A redis-server of its own (bin/redis-node) as the broker while inside."""
    with stack.redis_node(FOLDER / name) as url, stack.environment(NIGHTJAR_BROKER_URL=url), broker(url):
        yield


@contextlib.contextmanager
def broker(url: str):
    """This process publishes and consumes on url while inside."""
    saved, settings.NIGHTJAR_BROKER_URL = settings.NIGHTJAR_BROKER_URL, url
    try:
        yield
    finally:
        settings.NIGHTJAR_BROKER_URL = saved


def bench_redis(n: int, web_rates: list[int], web_seconds: float) -> None:
    """Raw ceilings and Nightjar's worker on Redis Streams, in the same run as RabbitMQ's."""
    with redis_server("redis"):
        say(f"Redis Streams raw ceiling (redis-py + sqlite3, XREADGROUP COUNT 50, {n} entries)")
        for batch, ack_with_read, key, label in (
            (1, False, "redis_raw_per_entry", "per entry, XACK per entry"),
            (1, True, "redis_raw_per_entry_acks_with_read", "per entry, XACKs sent with the next read"),
            (50, True, "redis_raw_batch50", "batches of 50, XACK sent with the next read"),
        ):
            values = []
            for _ in range(RUNS):
                prepare(n)
                values.append(raw_redis_consumer(n, batch, ack_with_read=ack_with_read))
            record(key, f"redis raw, {label}", values, "deliveries/s")
        say(f"Nightjar worker on Redis Streams ({n} entries; service mode sends XACKs with the next read)")
        for key, args, raws in (
            ("redis_worker_1proc", ("--prefetch", "50"), ("redis_raw_per_entry_acks_with_read", "redis_raw_per_entry")),
            ("redis_batch_1proc", ("--batch", "50", "--prefetch", "50"), ("redis_raw_batch50",)),
        ):
            values = [nightjar_rate(n, 1, *args) for _ in range(RUNS)]
            figure = record(
                key, f"redis {'batch worker' if '--batch' in args else 'worker'}, 1 process", values, "deliveries/s"
            )
            for raw in raws:
                figure[f"ratio_to_{raw}"] = statistics.median(values) / RESULTS[raw]["median"]
                say(f"    = {figure[f'ratio_to_{raw}']:.0%} of {RESULTS[raw]['label']}")
        bench_web(web_rates, web_seconds, key="redis_web")


def measured(n: int, contender) -> float:
    prepare(n)
    return contender()


def bench_pairs(n: int) -> None:
    """Per run: each raw ceiling, then Nightjar's worker in the same mode,
    one right after the other; the ratio is taken within each run and the
    median of those is reported (with the per-run ratios)."""
    rows = [
        # (mode, raws: [(key, label, callable)], worker: (label, args))
        (
            "per delivery",
            [
                ("raw", "raw, per delivery", lambda: raw_consumer(n, 1, 50)),
                ("lean", "raw lean, per delivery", lambda: raw_consumer(n, 1, 50, lean=True)),
            ],
            ("worker, 1 process", ("--prefetch", "50")),
        ),
        (
            "batch",
            [
                ("raw", "raw, batches of 50", lambda: raw_consumer(n, 50, 100)),
                ("lean", "raw lean, batches of 50", lambda: raw_consumer(n, 50, 100, lean=True)),
            ],
            ("batch worker, 1 process", ("--batch", "50", "--prefetch", "100")),
        ),
    ]
    run_pairs("pairs", rows, n)


def run_pairs(prefix: str, rows, n: int) -> None:
    for mode, raws, (worker_label, args) in rows:
        say(f"Pairs, {mode} ({n} deliveries, {RUNS} runs; raw ceilings then the worker, in each run)")
        values: dict[str, list[float]] = {key: [] for key, _, _ in raws}
        values["worker"] = []
        values["before"] = []
        for run in range(RUNS):
            for key, _, contender in raws:
                values[key].append(measured(n, contender))
            # With --before, the two checkouts take turns going first: neither always meets a warmer machine.
            order = [("worker", ROOT), ("before", BEFORE)] if BEFORE else [("worker", ROOT)]
            for key, root in order[:: -1 if run % 2 else 1]:
                values[key].append(nightjar_rate(n, 1, *args, root=root))
        slug = mode.replace(" ", "_")
        for key, label, _ in raws:
            record(f"{prefix}_{slug}_{key}", label, values[key], "deliveries/s")
        figure = record(f"{prefix}_{slug}_worker", worker_label, values["worker"], "deliveries/s")
        for key, label, _ in raws:
            ratios = [worker / raw for worker, raw in zip(values["worker"], values[key], strict=True)]
            figure[f"ratio_to_{key}"] = statistics.median(ratios)
            figure[f"ratios_to_{key}"] = ratios
            runs = ", ".join(f"{ratio:.2f}" for ratio in ratios)
            say(f"    = {statistics.median(ratios):.0%} of {label} (median of the runs' ratios: {runs})")
        if BEFORE:
            record(f"{prefix}_{slug}_before", f"{worker_label}, {BEFORE}", values["before"], "deliveries/s")
            ratios = [now / then for now, then in zip(values["worker"], values["before"], strict=True)]
            figure["ratio_to_before"] = statistics.median(ratios)
            runs = ", ".join(f"{ratio:.2f}" for ratio in ratios)
            say(f"    = {statistics.median(ratios):.0%} of the worker in {BEFORE} (median of the runs' ratios: {runs})")


def bench_redis_pairs(n: int) -> None:
    """The same pairs on Redis Streams (a redis-server of its own)."""
    with redis_server("redis-pairs"):
        rows = [
            (
                "per entry",
                [
                    ("raw", "redis raw, per entry, XACK per entry", lambda: raw_redis_consumer(n, 1)),
                    (
                        "raw_acks_with_read",
                        "redis raw, per entry, XACKs sent with the next read",
                        lambda: raw_redis_consumer(n, 1, ack_with_read=True),
                    ),
                ],
                ("redis worker, 1 process", ("--prefetch", "50")),
            ),
            (
                "batch",
                [
                    (
                        "raw",
                        "redis raw, batches of 50, XACK sent with the next read",
                        lambda: raw_redis_consumer(n, 50, ack_with_read=True),
                    ),
                    (
                        "lean",
                        "redis raw lean, batches of 50, XACK sent with the next read",
                        lambda: raw_redis_consumer(n, 50, ack_with_read=True, lean=True),
                    ),
                ],
                ("redis batch worker, 1 process", ("--batch", "50", "--prefetch", "50")),
            ),
        ]
        run_pairs("redis_pairs", rows, n)


def bench_names() -> None:
    """Issue 23: one request's name check is bounded, and clusters() is linear."""

    def microseconds(function, text: str) -> float:
        return seconds(function, text) * 1e6

    def seconds(function, text: str) -> float:
        start = time.perf_counter()
        with contextlib.suppress(contract.ContractError):
            function(text)
        return time.perf_counter() - start

    worst = "a" + "\u0301" * 1_300_000  # 2.6 MB: once 30 s of a worker
    record(
        "names_worst",
        "clean_name of 'a' + 1.3M combining marks",
        [microseconds(contract.clean_name, worst) for _ in range(RUNS)],
        "µs",
    )

    def best(text: str) -> float:
        # The best of five: one timing of a few milliseconds is at the mercy of
        # whatever else the machine runs (a ratio of single timings read 45x
        # on a loaded CI machine); the least disturbed one is the function's.
        return min(seconds(contract.clusters, text) for _ in range(5))

    small, large = "a\u0301\u200d" * 20_000, "a\u0301\u200d" * 200_000
    ratio = [best(large) / best(small) for _ in range(RUNS)]
    record("names_linear", "clusters(): time of 10x input / time of 1x", ratio, "x")
    assert statistics.median(ratio) < 30, f"clusters() grew {statistics.median(ratio):.0f}x for 10x input"


def bench_postgres(quick: bool, sections: list[str]) -> None:
    """The raw ceilings, the workers (1, 2 and 4 processes) and the web path on
    PostgreSQL, in the same run: this benchmark again, on a cluster of its own."""
    say("PostgreSQL (a throwaway cluster on loopback): raw ceilings, workers with 1, 2 and 4 processes, web path")
    # The sections also asked for that it has (`--only postgres pairs`: pairs alone), else these four.
    asked = [name for name in sections if name in ("raw", "worker", "batch", "web", "pairs")]
    on_postgres(asked or ["raw", "worker", "batch", "web"], quick, "--processes", "1", "2", "4")


def on_postgres(sections: list[str], quick: bool, *args: str) -> None:
    """This benchmark again (those sections) on a PostgreSQL cluster of its
    own; its figures join this run's as postgres_KEY."""
    with stack.postgres_cluster() as url:
        child_json = FOLDER / f"postgres-{uuid.uuid4().hex[:6]}.json"
        command = [PYTHON, str(ROOT / "bin" / "benchmark.py"), "--only", *sections, "--json", str(child_json)]
        command += [*args] + (["--quick"] if quick else []) + (["--before", str(BEFORE)] if BEFORE else [])
        command += ["--runs", str(RUNS)]
        env = {**os.environ, "NIGHTJAR_BENCH_DATABASE_URL": url}
        env.pop("DATABASE_URL", None)
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with stack.processes([child]):
            for line in child.stdout:
                say(f"  [postgres] {line.rstrip()}")
            assert child.wait() == 0, "the PostgreSQL run failed"
        for key, figure in json.loads(child_json.read_text()).items():
            RESULTS[f"postgres_{key}"] = {**figure, "label": f"PostgreSQL: {figure['label']}"}


def describe() -> str:
    """The first line: the machine, the database, the broker."""
    where = (
        "SQLite (WAL) in " + str(FOLDER)
        if connection.vendor == "sqlite"
        else "PostgreSQL " + connection.settings_dict["HOST"]
    )
    return f"Nightjar benchmark: {os.cpu_count()} cores, {where}, RabbitMQ {transport.masked_url()}"


def prepare_database() -> None:
    """Migrate the benchmark's database, collect the static files, make the lean tables."""
    call_command("migrate", verbosity=0)
    # The web rows serve pages with hashed static names: a fresh clone has none yet.
    call_command("collectstatic", interactive=False, verbosity=0)
    create_lean_tables()
