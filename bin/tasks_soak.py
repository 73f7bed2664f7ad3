#!/usr/bin/env python3
"""Tasks chaos soak: the example project (examples/tasks_demo) under real
faults, on loopback only, bounded in count and time.

    .venv/bin/python bin/tasks_soak.py [--tasks 500] [--workers 3] [--backend nightjar|db|both]

It enqueues N `record_visit` tasks (each inserts one Visit row with its own
label) from a separate process while 3 workers run, SIGKILLs a random worker
every 0.3-1 s (and starts another in its place), and, on Nightjar's backend,
stops and restarts the broker once mid-run. Then it stops killing, lets the
workers finish (reconcile republishes what the broker restart left) and
counts: effects (Visit rows), lost (labels with no row), duplicates (labels
with more than one), stuck (results not SUCCESSFUL).

    --backend nightjar   Nightjar's backend (nightjar_tasks): must end with N effects, 0 lost,
                         0 duplicate, 0 stuck, or the exit status is 1
    --backend db         django-tasks-db 0.13 (`db_worker`) under the same kills, no broker: its
                         figures are printed (how many stay RUNNING), they fail nothing
    --backend both       both, one after the other with the same seed, and the two side by side
    --transport redis    Redis Streams instead of RabbitMQ (Nightjar's backend)
    --transport database the database transport (db://default): no broker, the queue is the database's rows;
                         at the end no row may be left in its table (none held by a dead worker)
    --database postgres  a throwaway PostgreSQL cluster of its own (bin/postgres-cluster); with
                         --transport database it is stopped and started again mid-run, where the
                         brokers are (the enqueues wait meanwhile: the database is down)
    --http               each task first calls a real HTTP service (in this process) that honours
                         idempotency keys, with its own id as the key; counted at the service: one effect
                         per task (0 duplicate effects), however often a killed worker's redelivery called
    DATABASE_URL         a PostgreSQL database to use instead of a fresh SQLite file (emptied first)
                         (--database postgres starts one of its own instead)
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "tasks_demo"
sys.path.insert(0, str(ROOT))
PYTHON = sys.executable

from devtools import chaos  # noqa: E402
from devtools.keyserver import KeyServer  # noqa: E402
from devtools.ports import free_port  # noqa: E402

# How each backend's worker runs as a service, each its own process.
WORKERS = {
    "nightjar": ["nightjar_worker", "--channel", "tasks", "--serve", "--reconcile-every", "2"],
    "db": ["db_worker", "--interval", "0.1", "--no-reload", "--no-startup-delay"],
}


class TasksSoak:
    def __init__(self, args: argparse.Namespace, backend: str) -> None:
        self.args = args
        self.backend = backend
        self.broker = "redis" if args.transport == "redis" else "rabbitmq"
        self.uses_broker = backend == "nightjar" and args.transport != "database"
        self.on_database = backend == "nightjar" and args.transport == "database"
        self.folder = Path(tempfile.mkdtemp(prefix=f"nightjar-tasks-soak-{backend}-"))
        self.broker_port = free_port(rabbitmq=self.broker == "rabbitmq")
        self.postgres = chaos.Postgres("nightjar-tasks-pg-") if args.database == "postgres" else None
        self.database_restarts = 0
        database_url = self.postgres.start() if self.postgres else os.environ.get("DATABASE_URL")
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url or f"sqlite:///{self.folder / 'soak.sqlite3'}",
            "TASKS_DEMO_BACKEND": backend,
            "NIGHTJAR_TASKS_QUEUE": "tasks_demo.chaos",
            "NIGHTJAR_RUN_FILE": "",  # never the settings of a demo someone runs in the checkout
            "NIGHTJAR_CLAIM_IDLE_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
        }
        if backend == "nightjar" and args.transport == "database":
            self.env["NIGHTJAR_BROKER_URL"] = "db://default"
        self.workers: list[subprocess.Popen | None] = [None] * args.workers
        self.logs: list[Path] = []
        self.kills = self.broker_restarts = 0
        self.enqueued = 0
        self.stop_chaos = threading.Event()
        self.service = KeyServer() if args.http else None  # --http: the key-honouring service

    def say(self, line: str) -> None:
        print(f"[{self.backend} {time.monotonic() - self.started:6.1f}s] {line}", flush=True)

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return chaos.manage(DEMO / "manage.py", *args, env=self.env, check=check)

    def queue_rows(self) -> int:
        """The database transport's rows left in its table for this queue (claimed or not)."""
        script = (
            "from django.db import connection; from nightjar_delivery.transport import database; "
            "cursor = connection.cursor(); "
            f"cursor.execute(f'SELECT COUNT(*) FROM {{database.TABLE}} WHERE queue = %s', [{self.env['NIGHTJAR_TASKS_QUEUE']!r}]); "
            "print(cursor.fetchone()[0])"
        )
        return int(self.manage("shell", "-c", script).stdout.split()[-1])

    def broker_node(self, action: str) -> None:
        command = [str(ROOT / "bin" / f"{self.broker}-node"), action, str(self.folder / self.broker)]
        if action == "start":
            command.append(str(self.broker_port))
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        if action == "start":
            self.env["NIGHTJAR_BROKER_URL"] = result.stdout.strip()

    def start_worker(self, index: int) -> None:
        log = self.folder / f"worker-{index}-{len(self.logs)}.log"
        self.logs.append(log)
        command = [PYTHON, str(DEMO / "manage.py"), *WORKERS[self.backend]]
        if self.backend == "db":
            command += ["--worker-id", f"chaos-{index}-{len(self.logs)}"]
        env = {**self.env, "NIGHTJAR_CONSUMER_NAME": f"chaos-{index}"}
        self.workers[index] = chaos.start_logged(command, env=env, log=log)

    def chaos(self) -> None:
        """SIGKILL a random worker every 0.3-1 s and start a new one in its place."""
        chaos.kill_at_random(self.workers, self.killed, stop=self.stop_chaos, seed=self.args.seed)

    def killed(self, index: int) -> None:
        self.kills += 1
        self.start_worker(index)

    def ids(self) -> list[str]:
        path = self.folder / "ids.txt"
        return path.read_text().split() if path.exists() else []

    def enqueue(self, count: int, label: str) -> None:
        """COUNT tasks from a process of their own, as a web request would."""
        ids = str(self.folder / "ids.txt")
        call = ["--call", self.service.url] if self.service else []
        self.manage(
            "demo", "--visits", str(count), "--label", label, "--linger", str(self.args.linger), "--ids", ids, *call
        )
        self.enqueued = len(self.ids())

    def report(self) -> dict:
        return json.loads(self.manage("demo", "--report", "--ids", str(self.folder / "ids.txt")).stdout)

    def run(self) -> dict:
        self.started = time.monotonic()
        deadline = self.started + self.args.max_seconds
        n = self.args.tasks
        self.say(f"Folder {self.folder}; {n} tasks, {len(self.workers)} workers")
        if self.uses_broker:
            self.broker_node("start")
        self.manage("migrate", "--noinput")
        if "sqlite" not in self.env["DATABASE_URL"]:
            self.manage("flush", "--noinput")
        if self.service:
            self.service.__enter__()
        try:
            for index in range(len(self.workers)):
                self.start_worker(index)
            killer = threading.Thread(target=self.chaos, daemon=True)
            killer.start()
            chaos_started = time.monotonic()
            # Half, then (Nightjar) a quarter while the broker is down, then the rest.
            half, quarter = n // 2, n // 4
            self.enqueue(half, "first")
            if self.uses_broker:
                self.say(f"{self.enqueued} enqueued; stopping {self.broker}")
                self.broker_node("stop")
            elif self.on_database and self.postgres:  # the queue is PostgreSQL: it restarts instead
                self.say(f"{self.enqueued} enqueued; stopping PostgreSQL (the queue) for 2 s")
                self.postgres.restart(2)
                self.database_restarts += 1
                self.say("PostgreSQL started again")
            self.enqueue(quarter, "second")
            if self.uses_broker:
                self.say(f"{self.enqueued} enqueued, the last {quarter} while {self.broker} is down; starting it again")
                self.broker_node("start")
                self.broker_restarts += 1
            self.enqueue(n - half - quarter, "third")
            left = max(3.0, self.args.min_chaos_seconds - (time.monotonic() - chaos_started))
            self.say(f"All {self.enqueued} enqueued; killing goes on for {left:.0f} s more")
            time.sleep(left)
            self.stop_chaos.set()
            killer.join()
            # The workers keep running, unharmed: wait until nothing more finishes.
            rounds, last, unchanged = 0, None, 0
            while time.monotonic() < deadline:
                figures = self.report()
                statuses = figures["statuses"]
                if statuses.get("SUCCESSFUL", 0) == n:
                    break
                if statuses == last:
                    unchanged += 1
                    if unchanged >= self.args.settle_seconds:
                        break  # what is left stays where it is
                else:
                    last, unchanged = statuses, 0
                # --older-than 2: with 0 one reconcile call republishes the rows it has just published, pass
                # after pass (each pass finds them due again), until its 300 s budget.
                if self.backend == "nightjar" and rounds % 5 == 0:
                    republished = self.manage(
                        "nightjar_reconcile", "--channel", "tasks", "--older-than", "2", check=False
                    ).stdout.strip()
                    self.say(f"{statuses}; {republished.splitlines()[-1] if republished else 'reconcile said nothing'}")
                rounds += 1
                time.sleep(1)
            figures = self.report()
            figures["queue_rows"] = self.queue_rows() if self.on_database else 0
        finally:
            self.stop_chaos.set()
            for proc in self.workers:
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in self.workers:
                if proc is not None:
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            if self.uses_broker:
                self.broker_node("stop")
            if self.service:
                self.service.__exit__(None, None, None)
            if self.postgres:
                self.postgres.remove()
        statuses = figures["statuses"]
        # A worker killed with a task unacknowledged: the broker hands it to another (Nightjar's workers say so).
        figures["redeliveries"] = sum(log.read_text(errors="replace").count("redelivered=True") for log in self.logs)
        figures.update(
            backend=self.backend,
            tasks=n,
            enqueued=len(self.ids()),
            lost=n - figures["labels"],
            stuck=n - statuses.get("SUCCESSFUL", 0),
            running=statuses.get("RUNNING", 0),
            kills=self.kills,
            broker_restarts=self.broker_restarts,
            database_restarts=self.database_restarts,
            seconds=round(time.monotonic() - self.started, 1),
        )
        figures["ok"] = figures["visits"] == n and figures["lost"] == 0 and figures["duplicates"] == 0
        figures["ok"] = figures["ok"] and figures["stuck"] == 0 and figures["enqueued"] == n
        figures["ok"] = figures["ok"] and figures["queue_rows"] == 0
        if self.service:
            labels = Counter(effect["label"] for effect in self.service.effects)
            figures.update(
                calls=len(self.service.requests),
                call_effects=len(self.service.effects),
                call_duplicates=sum(count - 1 for count in labels.values()),
            )
            figures["ok"] = figures["ok"] and figures["call_effects"] == n and figures["call_duplicates"] == 0
        if figures["ok"] and not self.args.keep:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            figures["logs"] = str(self.folder)
        return figures


NAMES = {"nightjar": "Nightjar (nightjar_tasks)", "db": "django-tasks-db 0.13 (db_worker)"}


def summary(all_figures: list[dict]) -> None:
    print()
    print("Tasks chaos soak summary")
    rows = [
        ("tasks enqueued", "enqueued"),
        ("effects (Visit rows)", "visits"),
        ("lost (no row)", "lost"),
        ("duplicate rows", "duplicates"),
        ("not SUCCESSFUL", "stuck"),
        ("  of which RUNNING", "running"),
        ("worker SIGKILLs", "kills"),
        ("redeliveries seen", "redeliveries"),
        ("broker restarts", "broker_restarts"),
        ("PostgreSQL restarts", "database_restarts"),
        ("queue rows left (db://)", "queue_rows"),
        ("seconds", "seconds"),
    ]
    if "calls" in all_figures[0]:
        rows[-1:-1] = [
            ("HTTP calls (--http)", "calls"),
            ("  effects at the service", "call_effects"),
            ("  duplicate effects", "call_duplicates"),
        ]
    print(f"  {'':22}" + "".join(f"{NAMES[f['backend']]:>34}" for f in all_figures))
    for label, key in rows:
        print(f"  {label:22}" + "".join(f"{f[key]!s:>34}" for f in all_figures))
    for figures in all_figures:
        print(f"  {figures['backend']}: results by status {figures['statuses']}")
        if "logs" in figures:
            print(f"  {figures['backend']}: logs kept in {figures['logs']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--backend", choices=["nightjar", "db", "both"], default="nightjar")
    parser.add_argument("--transport", choices=["amqp", "redis", "database"], default="amqp")
    parser.add_argument(
        "--database", choices=["sqlite", "postgres"], default="sqlite", help="postgres: a throwaway cluster of its own."
    )
    parser.add_argument("--max-seconds", type=float, default=600, help="Give up after this long (default 600).")
    parser.add_argument(
        "--min-chaos-seconds", type=float, default=20, help="Keep killing workers at least this long (default 20)."
    )
    parser.add_argument(
        "--settle-seconds", type=int, default=15, help="After the kills: stop waiting once nothing changed this long."
    )
    parser.add_argument(
        "--linger", type=float, default=0.05, help="Each task waits this long after its insert (default 0.05 s)."
    )
    parser.add_argument("--http", action="store_true", help="Each task first calls a key-honouring HTTP service.")
    parser.add_argument("--seed", type=int, default=None, help="Seed for the choice of victims and delays.")
    parser.add_argument("--keep", action="store_true", help="Keep the folder with logs and database.")
    args = parser.parse_args()
    if args.tasks < 2 or args.workers < 1:
        parser.error("--tasks must be at least 2 and --workers at least 1")
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    backends = ["nightjar", "db"] if args.backend == "both" else [args.backend]
    all_figures = [TasksSoak(args, backend).run() for backend in backends]
    summary(all_figures)
    nightjar = next((f for f in all_figures if f["backend"] == "nightjar"), None)
    if nightjar is None:
        print(f"RESULT: measured (seed {args.seed}): django-tasks-db's figures fail nothing")
        return 0
    verdict = "PASS" if nightjar["ok"] else "FAIL"
    print(
        f"RESULT: {verdict} (seed {args.seed}): {nightjar['visits']} effects for {args.tasks} tasks, "
        f"{nightjar['lost']} lost, {nightjar['duplicates']} duplicate, {nightjar['stuck']} not SUCCESSFUL"
    )
    return 0 if nightjar["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
