"""The tasks section (issue 25): a trivial task that writes one row
(bench/peers/tasks.py), enqueued N times and then drained, on each backend:
Nightjar's (nightjar_tasks; per delivery and batch, 1 and 2 worker
processes), django-tasks-db 0.13 (`db_worker --interval 0`, 1 and 2
processes), Celery 5.7 (acks_late, prefork 2, RabbitMQ), on PostgreSQL
procrastinate 3.10 (its worker, 1 process; its queue is PostgreSQL itself,
so it has no SQLite leg) and the raw ceiling
(pika + sqlite3/psycopg: the task claimed, its row written and the task
marked done in one transaction, acked after the commit; as the ticket pairs'
ceilings, on the backend's own tables, and lean, on a table of three columns
without an index, to show what the schema itself costs; and on the backend's
tables running the task's own body, through Django's cursor, where the
others write its row with a plain statement: the ceiling of what any backend
running this task can do). Measured in pairs,
as the pairs section: each run measures the reference right before the
contender, and a ratio is the median of the runs' ratios. Throughput is
rows / (last row written - first), the same clock for every contender;
enqueue cost is the N enqueue calls' time / N, each call outside any
transaction, in a process of the contender's own."""

import json
import os
import statistics
import subprocess
import time
import uuid
from datetime import UTC, datetime

import pika
from django.apps import apps
from django.conf import settings
from django.db import connection

from bench import sections, stack
from bench.peers import ROW_TABLE
from nightjar_delivery import sql
from nightjar_delivery.transport import amqp, database

RAW_TASK_TABLE = "bench_raw_task"
TASK_TABLE, KEY_TABLE = "nightjar_tasks_taskrecord", "nightjar_tasks_taskcompletion"
NIGHTJAR = apps.is_installed("nightjar_tasks")

# key -> (label, worker processes)
CONTENDERS = {
    "raw_per_delivery": ("raw pika + {db} on the backend's tables, per delivery (prefetch 50)", 1),
    "raw_body_per_delivery": (
        "raw pika + {db} on the backend's tables running the task's own body (Django's cursor), per delivery (prefetch 50)",
        1,
    ),
    "raw_lean_per_delivery": ("raw lean pika + {db}, per delivery (prefetch 50)", 1),
    "raw_batch50_each": (
        "raw pika + {db} on the backend's tables, batches of 50 (prefetch 100), each task's row in a savepoint",
        1,
    ),
    "raw_body_batch50_each": (
        "raw pika + {db} on the backend's tables running the task's own body (Django's cursor), batches of 50"
        " (prefetch 100), each body in a savepoint",
        1,
    ),
    "raw_lean_batch50": ("raw lean pika + {db}, batches of 50 (prefetch 100), one multi-row INSERT", 1),
    "dtdb_1proc": ("django-tasks-db 0.13, db_worker --interval 0, 1 process", 1),
    "dtdb_2proc": ("django-tasks-db 0.13, db_worker --interval 0, 2 processes", 2),
    "celery_prefork2": ("Celery 5.7, acks_late, prefork 2 (RabbitMQ)", 2),
    "procrastinate_1proc": ("procrastinate 3.10, its worker (concurrency 1), 1 process", 1),
    "nightjar_1proc": ("Nightjar tasks, per delivery, 1 process", 1),
    "nightjar_2proc": ("Nightjar tasks, per delivery, 2 processes", 2),
    "nightjar_batch_1proc": ("Nightjar tasks, batch 50, 1 process", 1),
    "nightjar_batch_2proc": ("Nightjar tasks, batch 50, 2 processes", 2),
    # One command, `--processes 2` (nightjar_delivery/supervisor.py): its two children.
    "nightjar_processes2": ("Nightjar tasks, per delivery, one worker --processes 2", 2),
    # The database transport (issue 49): no broker, the queue is a table of the same database.
    "nightjar_db_1proc": ("Nightjar tasks on the database transport (db://default), per delivery, 1 process", 1),
    "nightjar_db_batch_1proc": ("Nightjar tasks on the database transport (db://default), batch 50, 1 process", 1),
    # The same workers with nightjar_tasks.limits.Limit replaced by nothing: what the time limit costs.
    "nightjar_1proc_no_limit": ("Nightjar tasks, per delivery, 1 process, without the time limit", 1),
    "nightjar_batch_1proc_no_limit": ("Nightjar tasks, batch 50, 1 process, without the time limit", 1),
}
# (reference, contender, the target of contender/reference per worker process, or None). The raw
# ceiling the target is about runs the task's own body, as every backend must; the one writing the
# row with a plain statement and the lean one are there to show what Django's cursor and the
# schema cost, each without a target of its own.
PAIRS = [
    ("raw_body_per_delivery", "nightjar_1proc", 0.6),
    ("raw_per_delivery", "nightjar_1proc", None),
    ("raw_lean_per_delivery", "nightjar_1proc", None),
    ("raw_body_batch50_each", "nightjar_batch_1proc", 0.6),
    ("raw_batch50_each", "nightjar_batch_1proc", None),
    ("raw_lean_batch50", "nightjar_batch_1proc", None),
    ("dtdb_1proc", "nightjar_1proc", 3.0),
    ("dtdb_2proc", "nightjar_2proc", 3.0),
    ("dtdb_1proc", "nightjar_batch_1proc", 3.0),
    ("celery_prefork2", "nightjar_2proc", 2.0),
    ("celery_prefork2", "nightjar_batch_2proc", 2.0),
]
# On PostgreSQL only (procrastinate's queue is PostgreSQL): after PAIRS, no target of its own.
POSTGRES_PAIRS = [("procrastinate_1proc", "nightjar_1proc", None)]
# The tasks-processes section (issue 51): `worker --processes 2` against two workers started apart.
PROCESSES_PAIRS = [("nightjar_2proc", "nightjar_processes2", None)]


def db_pairs(vendor: str) -> list[tuple[str, str, float | None]]:
    """The tasks-db section (issue 49): Nightjar's tasks on the database transport against the
    backends that need nothing but the database, with the issue's targets: per delivery >= 3x
    django-tasks-db and >= 2x procrastinate on PostgreSQL, >= 5x django-tasks-db on SQLite;
    batches of 50 >= 8x django-tasks-db."""
    if vendor == "postgresql":
        return [
            ("dtdb_1proc", "nightjar_db_1proc", 3.0),
            ("procrastinate_1proc", "nightjar_db_1proc", 2.0),
            ("dtdb_1proc", "nightjar_db_batch_1proc", 8.0),
            ("raw_body_per_delivery", "nightjar_db_1proc", None),
        ]
    return [
        ("dtdb_1proc", "nightjar_db_1proc", 5.0),
        ("dtdb_1proc", "nightjar_db_batch_1proc", 8.0),
        ("raw_body_per_delivery", "nightjar_db_1proc", None),
    ]


# The tasks-limit section (issue 39): the time limit's cost per task, the same worker without it
# as the reference; a ratio near 1 means the alarm costs nothing measurable.
LIMIT_PAIRS = [
    ("nightjar_1proc_no_limit", "nightjar_1proc", None),
    ("nightjar_batch_1proc_no_limit", "nightjar_batch_1proc", None),
]


def env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(stack.ROOT), str(stack.ROOT / "bin"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep), "PYTHONUNBUFFERED": "1", **extra}


def prepare_schema() -> None:
    """django-tasks-db's tables (its settings: nightjar's plus its app),
    procrastinate's on PostgreSQL, the task's row table and the raw
    ceiling's task table."""
    peers = ["settings_dtdb"] + (["settings_procrastinate"] if connection.vendor == "postgresql" else [])
    for name in peers:
        subprocess.run(
            [sections.PYTHON, "-m", "django", "migrate", "-v", "0"],
            env=env(DJANGO_SETTINGS_MODULE=f"bench.peers.{name}"),
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
    tables = [ROW_TABLE, RAW_TASK_TABLE, "django_tasks_database_dbtaskresult", database.TABLE]
    if NIGHTJAR:
        tables += [model._meta.db_table for model in apps.get_app_config("nightjar_tasks").get_models()]
    with connection.constraint_checks_disabled(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":  # every table emptied: no key is left dangling
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:  # (procrastinate_jobs' CASCADE takes its events)
            cursor.execute(f"TRUNCATE {', '.join([*tables, 'procrastinate_jobs'])} CASCADE")


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
    return enqueued(n, environment, *extra)["seconds"] / n * 1e6


def enqueued(n: int, environment: dict[str, str], *extra: str) -> dict:
    """bench.peers enqueue's figures: seconds, cpu_seconds, calls (with --gap)."""
    result = subprocess.run(
        [sections.PYTHON, "-m", "bench.peers", "enqueue", str(n), *extra],
        cwd=stack.ROOT,
        env=environment,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise RuntimeError(f"enqueue failed:\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def nightjar_env(key: str) -> dict[str, str]:
    """Nightjar's contenders: nightjar.settings as shipped (RabbitMQ), or on the database transport."""
    return env(NIGHTJAR_BROKER_URL="db://default") if key.startswith("nightjar_db") else env()


def peer(key: str, n: int) -> tuple[float, float]:
    """One run of a backend: (tasks/s, µs per enqueue)."""
    reset()
    processes = CONTENDERS[key][1]
    if key.startswith("dtdb"):
        environment = env(DJANGO_SETTINGS_MODULE="bench.peers.settings_dtdb")
        micros = enqueue(n - 1, environment)
        command = [sections.PYTHON, "-m", "django", "db_worker", "--interval", "0", "--no-startup-delay"]
        procs = start([*command, "--no-reload"], processes, environment)
    elif key.startswith("celery"):
        queue = f"bench.celery-{uuid.uuid4().hex[:6]}"
        environment = env(NIGHTJAR_BENCH_CELERY_BROKER=settings.NIGHTJAR_BROKER_URL, NIGHTJAR_BENCH_CELERY_QUEUE=queue)
        micros = enqueue(n - 1, environment, "--celery")
        command = [sections.PYTHON, "-m", "celery", "-A", "bench.peers.celery_app", "worker", "-Q", queue]
        command += ["--pool", "prefork", "--concurrency", "2", "--loglevel", "WARNING"]
        command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        procs = start(command, 1, environment)
    elif key.startswith("procrastinate"):
        environment = env(DJANGO_SETTINGS_MODULE="bench.peers.settings_procrastinate")
        micros = enqueue(n - 1, environment, "--procrastinate")
        command = [sections.PYTHON, "-m", "django", "procrastinate", "worker"]
        procs = start([*command, "--concurrency", "1"], processes, environment)
    else:  # Nightjar's backend: nightjar.settings as shipped, its worker on the tasks channel
        environment = nightjar_env(key)
        micros = enqueue(n - 1, environment)
        mode = ["--batch", "50", "--prefetch", "100"] if "batch" in key else ["--prefetch", "50"]
        # (Without the time limit: `python -m bench.peers worker ...` runs the same command, Limit disarmed.)
        worker = ["-m", "bench.peers", "worker-without-time-limit"] if key.endswith("_no_limit") else ["manage.py"]
        if key == "nightjar_processes2":  # one parent starting its children
            mode, processes = [*mode, "--processes", str(processes)], 1
        procs = start(
            [sections.PYTHON, *worker, "worker", "--serve", "--channel", "tasks", *mode], processes, environment
        )
    with stack.processes(procs):
        # N tasks in all, the enqueue's warm-up call one of them: as the raw ceiling drains N (and a
        # batch worker's last batch is a full one, not one task waiting out --batch-ms for more).
        wait_for_rows(n, procs)
    count, seconds = rows_span()
    assert count == n, f"{count} rows for {n} tasks"
    if key.startswith("celery"):
        with amqp.short_channel("bench") as channel:
            channel.queue_delete(queue)
    return (n - 1) / seconds, micros


def pickup(key: str, count: int) -> list[float]:
    """The worker (per delivery, 1 process) started and idle for 3 s, then
    COUNT enqueues 50 ms apart from a process of their own: ms from each
    call's start (its commit inside it) to the row its body wrote."""
    reset()
    if key.startswith("nightjar"):
        environment = nightjar_env(key)
        command = [sections.PYTHON, "manage.py", "worker", "--serve", "--channel", "tasks", "--prefetch", "50"]
    else:  # django-tasks-db's worker as its documentation starts it (its default interval, 1 s)
        environment = env(DJANGO_SETTINGS_MODULE="bench.peers.settings_dtdb")
        command = [sections.PYTHON, "-m", "django", "db_worker", "--no-startup-delay", "--no-reload"]
    procs = start(command, 1, environment)
    with stack.processes(procs):
        time.sleep(3)
        calls = enqueued(count, environment, "--gap", "0.05")["calls"]
        wait_for_rows(count + 1, procs)  # (and the warm-up call's)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT n, written FROM {ROW_TABLE} WHERE n >= 0")
        written = dict(cursor.fetchall())
    return [(written[i] - called) * 1000 for i, called in enumerate(calls)]


def bench_pickup(keys: list[str], count: int) -> None:
    """Each key's pick-up latency (enqueue -> body start), p50 and p99."""
    say(f"  Pick-up, enqueue -> the body's row, an idle worker, {count} tasks 50 ms apart (ms from the enqueue call):")
    for key in keys:
        values = pickup(key, count)
        quantiles = statistics.quantiles(values, n=100, method="inclusive")
        label = CONTENDERS[key][0].split(", per delivery")[0].split(", db_worker")[0]
        sections.RESULTS[f"tasks_pickup_{key}_ms"] = {
            "label": f"{label}: enqueue -> body start",
            "unit": "ms",
            "p50": quantiles[49],
            "p99": quantiles[98],
            "max": max(values),
            "count": len(values),
        }
        say(f"    {label}: p50 {quantiles[49]:.1f} ms, p99 {quantiles[98]:.1f} ms, max {max(values):.1f} ms")


def raw(key: str, n: int) -> tuple[float, float]:
    """The raw ceiling: enqueue = the task's row in a transaction of its own,
    then a confirmed publish; consume = per delivery (or 50), one transaction
    that claims the tasks not done yet, writes their rows and marks them
    done, acked after the commit.

    On the backend's own tables (as the ticket pairs' raw ceilings), the
    statements Nightjar's runner sends: the task's row read and its
    completion key inserted (one statement on PostgreSQL), the body's row,
    the done-mark UPDATE (sent with the COMMIT on PostgreSQL), each task's
    row in a savepoint of its own in a batch (a body that fails rolls back
    alone). Lean: a task table of id, status and finish time, no index, and a
    batch's rows in one multi-row INSERT, which no backend running its users'
    bodies can do.

    Those write the body's row with a statement of their own on the plain
    cursor (~5 µs on SQLite); "body" runs the task's own body instead,
    bench.peers.tasks.write, through Django's cursor (~40 µs: its wrappers,
    a cursor per call) on the same connection, in the same transaction:
    what every backend must run, so the ratio to it is the backend's own
    cost."""
    reset()
    batch, prefetch = (50, 100) if "batch50" in key else (1, 50)
    lean, body = "lean" in key, "body" in key
    queue = f"bench.raw-tasks-{uuid.uuid4().hex[:6]}"
    db, mark, begin = sections.dbapi(django=body)
    conn = pika.BlockingConnection(amqp.parameters())
    channel = conn.channel()
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    channel.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    # (On PostgreSQL Django's own cursors bind on the client: the plain connection's kind instead.)
    cursor = sql.server_side_cursor(db) if body and connection.vendor == "postgresql" else db.cursor()
    statements = LeanStatements(mark) if lean else TableStatements(mark, body=body)
    started = time.perf_counter()
    for number in range(n):
        cursor.execute(begin)
        cursor.execute(*statements.enqueue(number))
        task_id = cursor.fetchone()[0]
        cursor.execute("COMMIT")
        channel.basic_publish("", queue, json.dumps({"task": task_id}).encode(), props)
    micros = (time.perf_counter() - started) / n * 1e6

    def commit(bodies: list[bytes]) -> None:
        ids = [json.loads(message)["task"] for message in bodies]
        cursor.execute(begin)
        statements.run(cursor, ids, each=batch > 1)
        if connection.vendor == "postgresql" and not lean:
            with db.pipeline():  # the done-mark sent with the COMMIT, as the runner does
                statements.mark_done(cursor)
                cursor.execute("COMMIT")
        else:
            statements.mark_done(cursor)
            cursor.execute("COMMIT")

    channel.basic_qos(prefetch_count=prefetch)
    done, pending = 0, []
    for method, _props, message in channel.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        pending.append((method.delivery_tag, message))
        if len(pending) >= batch or done + len(pending) >= n:
            commit([message for _, message in pending])
            channel.basic_ack(pending[-1][0], multiple=True)
            done += len(pending)
            pending = []
        if done >= n:
            break
    channel.cancel()
    channel.queue_delete(queue)
    conn.close()
    if not body:  # (Django's own connection stays Django's)
        db.close()
    count, seconds = rows_span()
    assert done == n and count == n, f"raw consumer handled {done} of {n}, {count} rows"
    return (n - 1) / seconds, micros


def stamp():
    """Now, as the database stores a DateTimeField (UTC text on SQLite)."""
    now = datetime.now(UTC)
    return str(now.replace(tzinfo=None)) if connection.vendor == "sqlite" else now


class LeanStatements:
    """A task table of three columns; a batch's rows in one INSERT."""

    def __init__(self, mark: str) -> None:
        self.mark, self.done = mark, []

    def enqueue(self, number: int):
        return f"INSERT INTO {RAW_TASK_TABLE} (status) VALUES ('READY') RETURNING id", []

    def run(self, cursor, ids: list[int], *, each: bool) -> None:
        mark = self.mark
        cursor.execute(
            f"UPDATE {RAW_TASK_TABLE} SET status = 'DONE', finished = {mark} WHERE status = 'READY' AND id IN ("
            + ", ".join([mark] * len(ids))
            + ") RETURNING id",
            [time.time(), *ids],
        )
        new = [row[0] for row in cursor.fetchall()]
        if new:
            cursor.execute(
                f"INSERT INTO {ROW_TABLE} (n, written) VALUES " + ", ".join([f"({mark}, {mark})"] * len(new)),
                [v for task_id in new for v in (task_id, time.time())],
            )

    def mark_done(self, cursor) -> None:
        pass  # (the UPDATE above marked them)


class TableStatements:
    """Nightjar's task row and completion key, written as its runner does."""

    def __init__(self, mark: str, *, body: bool = False) -> None:
        from bench.peers import tasks as peer_tasks  # (its @task needs the TASKS setting: not at import)

        self.mark, self.done, self.body = mark, [], peer_tasks.write if body else None
        self.pg = connection.vendor == "postgresql"
        self.json = f"{mark}::jsonb" if self.pg else mark

    def enqueue(self, number: int):
        from nightjar_tasks.models import new_task_id  # (task ids are random: the column has no default)

        mark, now = self.mark, stamp()
        columns = "id, task_path, args, kwargs, queue_name, backend, priority, takes_context, status, enqueued_at, "
        columns += "published_at, errors, worker_ids, attempts, requeued_at_attempt, atomic"
        values = f"{mark}, {mark}, {self.json}, {self.json}, 'default', 'default', 0, FALSE, 'READY', {mark}, {mark}, "
        values += f"{self.json}, {self.json}, 0, 0, TRUE"
        sql = f"INSERT INTO {TASK_TABLE} ({columns}) VALUES ({values}) RETURNING id"
        return sql, [new_task_id(), "bench.peers.tasks.write_row", json.dumps([number]), "{}", now, now, "[]", "[]"]

    def run(self, cursor, ids: list[int], *, each: bool) -> None:
        mark, now = self.mark, stamp()
        marks = ", ".join([mark] * len(ids))
        claim = (
            f"INSERT INTO {KEY_TABLE} (task_id, completed) SELECT id, {mark} FROM {TASK_TABLE} "
            f"WHERE id IN ({marks}) AND atomic AND status NOT IN ('SUCCESSFUL', 'FAILED') "
            "ON CONFLICT (task_id) DO NOTHING RETURNING task_id"
        )
        if self.pg:  # the key and the row in one statement, as the runner's claim
            cursor.execute(
                f"WITH claim AS ({claim}) SELECT id, args, worker_ids FROM {TASK_TABLE} WHERE id IN (SELECT task_id FROM claim)",
                [now, *ids],
            )
            owned = cursor.fetchall()
        else:  # the row read, then the key (SQLite: one writer at a time already)
            cursor.execute(f"SELECT id, args, worker_ids FROM {TASK_TABLE} WHERE id IN ({marks})", ids)
            rows = cursor.fetchall()
            cursor.execute(claim, [now, *ids])
            keys = {row[0] for row in cursor.fetchall()}
            owned = [row for row in rows if row[0] in keys]
        self.done = []
        for task_id, args, worker_ids in owned:
            args = json.loads(args) if isinstance(args, str) else args
            workers = json.loads(worker_ids) if isinstance(worker_ids, str) else worker_ids
            if each:
                cursor.execute("SAVEPOINT body")
            if self.body:
                self.body(args[0])
            else:
                cursor.execute(f"INSERT INTO {ROW_TABLE} (n, written) VALUES ({mark}, {mark})", [args[0], time.time()])
            if each:
                cursor.execute("RELEASE SAVEPOINT body")
            done = stamp()
            self.done.append([now, now, done, json.dumps([*workers, "raw"]), task_id])

    def mark_done(self, cursor) -> None:
        mark, json_mark = self.mark, self.json
        cursor.executemany(
            f"UPDATE {TASK_TABLE} SET status = 'SUCCESSFUL', started_at = {mark}, last_attempted_at = {mark}, "
            f"finished_at = {mark}, return_value = NULL, worker_ids = {json_mark}, attempts = attempts + 1 "
            f"WHERE id = {mark}",
            self.done,
        )


def measure(key: str, n: int) -> tuple[float, float]:
    return raw(key, n) if key.startswith("raw") else peer(key, n)


def bench_tasks(n: int, quick: bool, *, pairs: list | None = None) -> None:
    """The pairs (PAIRS unless given: LIMIT_PAIRS for the time limit's cost)."""
    where = "SQLite" if connection.vendor == "sqlite" else "PostgreSQL"
    library = "sqlite3" if connection.vendor == "sqlite" else "psycopg"
    prepare_schema()
    if pairs is None:
        pairs = PAIRS + (POSTGRES_PAIRS if connection.vendor == "postgresql" else [])
    # Without nightjar_tasks: the peers and the lean ceilings alone (the others write to its tables).
    alone = dict.fromkeys(r for r, _, _ in pairs if "lean" in r or not r.startswith("raw"))
    pairs = pairs if NIGHTJAR else [(reference, None, None) for reference in alone]
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
        verdict = "no target" if target is None else f"target >= {target:g}x: {'met' if ratio >= target else 'NOT met'}"
        say(
            f"    = {ratio:.2f}x {CONTENDERS[reference][0].format(db=library)} per worker process "
            f"({verdict}; the runs' ratios: {runs}); "
            f"enqueue costs {statistics.median(enqueue_ratios):.2f}x of its"
        )


def say(line: str) -> None:
    sections.say(line)
