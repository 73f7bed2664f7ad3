"""The tasks section (issue 25): a trivial task that writes one row
(bench/peers/tasks.py), enqueued N times and then drained, on each backend:
Nightjar's (nightjar_tasks; per delivery and batch, 1 and 2 worker
processes), django-tasks-db 0.13 (`db_worker --interval 0`, 1 and 2
processes), Celery 5.7 (acks_late, prefork 2, RabbitMQ) and the raw ceiling
(pika + sqlite3/psycopg: the task's row marked done and its effect written
in one transaction, acked after the commit). Measured in pairs, as the
pairs section: each run measures the reference right before the contender,
and a ratio is the median of the runs' ratios. Throughput is rows / (last
row written - first), the same clock for every contender; enqueue cost is
the N enqueue calls' time / N, each call outside any transaction, in a
process of the contender's own."""

import json
import os
import statistics
import subprocess
import time
import uuid

import pika
from django.apps import apps
from django.conf import settings
from django.db import connection

from bench import sections, stack
from bench.peers import ROW_TABLE
from delivery.transport import amqp

RAW_TASK_TABLE = "bench_raw_task"
NIGHTJAR = apps.is_installed("nightjar_tasks")

# key -> (label, worker processes)
CONTENDERS = {
    "raw_per_delivery": ("raw pika + {db}, per delivery (prefetch 50)", 1),
    "raw_batch50": ("raw pika + {db}, batches of 50 (prefetch 100)", 1),
    "raw_batch50_each": ("raw pika + {db}, batches of 50, each task's row in a savepoint of its own", 1),
    "dtdb_1proc": ("django-tasks-db 0.13, db_worker --interval 0, 1 process", 1),
    "dtdb_2proc": ("django-tasks-db 0.13, db_worker --interval 0, 2 processes", 2),
    "celery_prefork2": ("Celery 5.7, acks_late, prefork 2 (RabbitMQ)", 2),
    "nightjar_1proc": ("Nightjar tasks, per delivery, 1 process", 1),
    "nightjar_2proc": ("Nightjar tasks, per delivery, 2 processes", 2),
    "nightjar_batch_1proc": ("Nightjar tasks, batch 50, 1 process", 1),
    "nightjar_batch_2proc": ("Nightjar tasks, batch 50, 2 processes", 2),
}
# (reference, contender, the target of contender/reference per worker process, or None)
PAIRS = [
    ("raw_per_delivery", "nightjar_1proc", 0.6),
    ("raw_batch50", "nightjar_batch_1proc", 0.6),
    ("raw_batch50_each", "nightjar_batch_1proc", 0.6),
    ("dtdb_1proc", "nightjar_1proc", 3.0),
    ("dtdb_2proc", "nightjar_2proc", 3.0),
    ("dtdb_1proc", "nightjar_batch_1proc", 3.0),
    ("celery_prefork2", "nightjar_2proc", 2.0),
    ("celery_prefork2", "nightjar_batch_2proc", 2.0),
]


def env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(stack.ROOT), str(stack.ROOT / "bin"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep), "PYTHONUNBUFFERED": "1", **extra}


def prepare_schema() -> None:
    """django-tasks-db's tables (its settings: nightjar's plus its app), the
    task's row table and the raw ceiling's task table."""
    subprocess.run(
        [sections.PYTHON, "-m", "django", "migrate", "-v", "0"],
        env=env(DJANGO_SETTINGS_MODULE="bench.peers.settings_dtdb"),
        check=True,
    )
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT" if connection.vendor == "sqlite" else "BIGSERIAL PRIMARY KEY"
    real = "REAL" if connection.vendor == "sqlite" else "DOUBLE PRECISION"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {ROW_TABLE} (id {serial}, n BIGINT, written {real})")
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {RAW_TASK_TABLE} (id {serial}, status VARCHAR(10), finished {real})"
        )


def reset() -> None:
    """Empty every contender's tables."""
    tables = [ROW_TABLE, RAW_TASK_TABLE, "django_tasks_database_dbtaskresult"]
    if NIGHTJAR:
        tables += [model._meta.db_table for model in apps.get_app_config("nightjar_tasks").get_models()]
    with connection.constraint_checks_disabled(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":  # every table emptied: no key is left dangling
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


def rows_span() -> tuple[int, float]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*), MIN(written), MAX(written) FROM {ROW_TABLE}")
        count, first, last = cursor.fetchone()
    return count, (last or 0) - (first or 0)


def wait_for_rows(n: int, procs: list[subprocess.Popen], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while (count := rows_span()[0]) < n:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"A worker exited with {proc.returncode}; see the logs in {sections.FOLDER}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Only {count} of {n} rows after {timeout} s")
        time.sleep(0.05)


def start(command: list[str], count: int, environment: dict[str, str]) -> list[subprocess.Popen]:
    procs = []
    for _ in range(count):
        with open(sections.FOLDER / f"tasks-worker-{uuid.uuid4().hex[:6]}.log", "w") as log:
            procs.append(
                subprocess.Popen(command, cwd=stack.ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
            )
    return procs


def enqueue(n: int, environment: dict[str, str], *extra: str) -> float:
    """N enqueues in a process of the contender's own: µs per enqueue."""
    result = subprocess.run(
        [sections.PYTHON, "-m", "bench.peers", "enqueue", str(n), *extra],
        cwd=stack.ROOT,
        env=environment,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise RuntimeError(f"enqueue failed:\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])["seconds"] / n * 1e6


def peer(key: str, n: int) -> tuple[float, float]:
    """One run of a backend: (tasks/s, µs per enqueue)."""
    reset()
    processes = CONTENDERS[key][1]
    if key.startswith("dtdb"):
        environment = env(DJANGO_SETTINGS_MODULE="bench.peers.settings_dtdb")
        micros = enqueue(n, environment)
        command = [sections.PYTHON, "-m", "django", "db_worker", "--interval", "0", "--no-startup-delay"]
        procs = start([*command, "--no-reload"], processes, environment)
    elif key.startswith("celery"):
        queue = f"bench.celery-{uuid.uuid4().hex[:6]}"
        environment = env(NIGHTJAR_BENCH_CELERY_BROKER=settings.NIGHTJAR_BROKER_URL, NIGHTJAR_BENCH_CELERY_QUEUE=queue)
        micros = enqueue(n, environment, "--celery")
        command = [sections.PYTHON, "-m", "celery", "-A", "bench.peers.celery_app", "worker", "-Q", queue]
        command += ["--pool", "prefork", "--concurrency", "2", "--loglevel", "WARNING"]
        command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        procs = start(command, 1, environment)
    else:  # Nightjar's backend: nightjar.settings as shipped, its worker on the tasks channel
        environment = env()
        micros = enqueue(n, environment)
        mode = ["--batch", "50", "--prefetch", "100"] if "batch" in key else ["--prefetch", "50"]
        procs = start(
            [sections.PYTHON, "manage.py", "worker", "--serve", "--channel", "tasks", *mode], processes, environment
        )
    with stack.processes(procs):
        wait_for_rows(n + 1, procs)  # the enqueue's warm-up call is one more
    count, seconds = rows_span()
    assert count == n + 1, f"{count} rows for {n + 1} tasks"
    if key.startswith("celery"):
        with amqp.short_channel("bench") as channel:
            channel.queue_delete(queue)
    return n / seconds, micros


def raw(key: str, n: int) -> tuple[float, float]:
    """The raw ceiling: enqueue = the task's row in a transaction of its own,
    then a confirmed publish; consume = per delivery (or 50), the task marked
    done where it was not, its row written, one transaction, acked after.
    raw_batch50 writes a batch's rows in one multi-row INSERT, which no
    backend running its users' bodies can do; raw_batch50_each writes them
    as a backend must, one body after another, each in a savepoint of its
    own (a body that fails rolls back alone), the floor of Nightjar's batch."""
    reset()
    batch, prefetch = (50, 100) if key.startswith("raw_batch50") else (1, 50)
    each = key == "raw_batch50_each"
    queue = f"bench.raw-tasks-{uuid.uuid4().hex[:6]}"
    db, mark, begin = sections.dbapi()
    conn = pika.BlockingConnection(amqp.parameters())
    channel = conn.channel()
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    channel.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    cursor = db.cursor()
    started = time.perf_counter()
    for _ in range(n):
        cursor.execute(begin)
        cursor.execute(f"INSERT INTO {RAW_TASK_TABLE} (status) VALUES ('READY') RETURNING id")
        task_id = cursor.fetchone()[0]
        cursor.execute("COMMIT")
        channel.basic_publish("", queue, json.dumps({"task": task_id}).encode(), props)
    micros = (time.perf_counter() - started) / n * 1e6

    def commit(bodies: list[bytes]) -> None:
        ids = [json.loads(body)["task"] for body in bodies]
        now = time.time()
        cursor.execute(begin)
        cursor.execute(
            f"UPDATE {RAW_TASK_TABLE} SET status = 'DONE', finished = {mark} WHERE status = 'READY' AND id IN ("
            + ", ".join([mark] * len(ids))
            + ") RETURNING id",
            [now, *ids],
        )
        new = [row[0] for row in cursor.fetchall()]
        if each:
            for task_id in new:
                cursor.execute("SAVEPOINT body")
                cursor.execute(f"INSERT INTO {ROW_TABLE} (n, written) VALUES ({mark}, {mark})", [task_id, time.time()])
                cursor.execute("RELEASE SAVEPOINT body")
        elif new:
            cursor.execute(
                f"INSERT INTO {ROW_TABLE} (n, written) VALUES " + ", ".join([f"({mark}, {mark})"] * len(new)),
                [v for task_id in new for v in (task_id, time.time())],
            )
        cursor.execute("COMMIT")

    channel.basic_qos(prefetch_count=prefetch)
    done, pending = 0, []
    for method, _props, body in channel.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        pending.append((method.delivery_tag, body))
        if len(pending) >= batch or done + len(pending) >= n:
            commit([body for _, body in pending])
            channel.basic_ack(pending[-1][0], multiple=True)
            done += len(pending)
            pending = []
        if done >= n:
            break
    channel.cancel()
    channel.queue_delete(queue)
    conn.close()
    db.close()
    count, seconds = rows_span()
    assert done == n and count == n, f"raw consumer handled {done} of {n}, {count} rows"
    return (n - 1) / seconds, micros


def measure(key: str, n: int) -> tuple[float, float]:
    return raw(key, n) if key.startswith("raw") else peer(key, n)


def bench_tasks(n: int, quick: bool) -> None:
    where = "SQLite" if connection.vendor == "sqlite" else "PostgreSQL"
    library = "sqlite3" if connection.vendor == "sqlite" else "psycopg"
    prepare_schema()
    pairs = PAIRS if NIGHTJAR else [(reference, None, None) for reference in dict.fromkeys(r for r, _, _ in PAIRS)]
    if not NIGHTJAR:
        say("  (nightjar_tasks is not installed: the peers alone, no pairs)")
    say(
        f"Tasks on {where} ({n} tasks writing one row each, {sections.RUNS} run(s); reference then contender, in each run)"
    )
    for reference, contender, target in pairs:
        values: dict[str, list[tuple[float, float]]] = {reference: [], contender: []}
        for _ in range(sections.RUNS):
            values[reference].append(measure(reference, n))
            if contender:
                values[contender].append(measure(contender, n))
        for key in filter(None, (reference, contender)):
            label = CONTENDERS[key][0].format(db=library)
            slug = f"tasks_{reference}_vs_{contender}_{key}" if contender else f"tasks_{key}"
            sections.record(slug, label, [rate for rate, _ in values[key]], "tasks/s")
            sections.record(f"{slug}_enqueue", f"{label}: enqueue", [us for _, us in values[key]], "µs per enqueue")
        if not contender:
            continue
        slug = f"tasks_{reference}_vs_{contender}_{contender}"
        per_process = CONTENDERS[reference][1] / CONTENDERS[contender][1]
        ratios = [c[0] / r[0] * per_process for r, c in zip(values[reference], values[contender], strict=True)]
        enqueue_ratios = [c[1] / r[1] for r, c in zip(values[reference], values[contender], strict=True)]
        figure = sections.RESULTS[slug]
        figure[f"ratio_to_{reference}"] = ratio = statistics.median(ratios)
        figure[f"ratios_to_{reference}"] = ratios
        figure[f"target_ratio_to_{reference}"] = target
        sections.RESULTS[f"{slug}_enqueue"][f"ratio_to_{reference}"] = statistics.median(enqueue_ratios)
        runs = ", ".join(f"{r:.2f}" for r in ratios)
        verdict = "met" if ratio >= target else "NOT met"
        say(
            f"    = {ratio:.2f}x {CONTENDERS[reference][0].format(db=library)} per worker process "
            f"(target >= {target:g}x: {verdict}; the runs' ratios: {runs}); "
            f"enqueue costs {statistics.median(enqueue_ratios):.2f}x of its"
        )


def say(line: str) -> None:
    sections.say(line)
