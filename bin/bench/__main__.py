"""The benchmark's command line and its table of sections (bin/benchmark.py
runs main()). Nothing starts before the arguments are read: --help and a
wrong argument leave no process behind."""

import argparse
import contextlib
import json
import os
import random
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import stack

INTRO = """Nightjar's benchmark: Nightjar against the raw ceiling, measured in one run.

    .venv/bin/python bin/benchmark.py [--quick] [--only SECTION ...] [--json FILE]

It prepares a throwaway SQLite database and queue (on RABBITMQ_URL, or on a
node of its own when that is not set) and prints a table, writing the same
figures as JSON (default benchmark.json):

"""
OUTRO = """
Each figure is the median of 3 runs (min and max shown). Throughput is
deliveries / (last commit - first commit), the same clock for every contender.
pika is used directly here only for the raw ceiling and for bulk pre-publishing.
"""


@dataclass
class Options:
    """What a section is given: the parsed arguments and the sizes they imply."""

    n: int
    quick: bool
    processes: tuple[int, ...]
    only: list[str]
    web_rates: list[int]
    web_seconds: float


@dataclass
class Section:
    run: Callable[[object, Options], None]  # (the sections module, options)
    help: str
    default: bool = True  # run when --only is not given


def _pairs(sections, options: Options) -> None:
    sections.bench_pairs(options.n)
    if sections.connection.vendor == "sqlite":  # Redis pairs once, with SQLite, as the redis rows
        sections.bench_redis_pairs(options.n)


def _tasks(sections, options: Options) -> None:
    from bench import tasks

    tasks.bench_tasks(300 if options.quick else 1000, options.quick)
    tasks.bench_pickup(["nightjar_1proc", "dtdb_1proc"], 40 if options.quick else 200)
    if sections.connection.vendor == "sqlite":  # then the same on PostgreSQL, in the same run
        sections.on_postgres(["tasks"], options.quick)


def _tasks_limit(sections, options: Options) -> None:
    from bench import tasks

    tasks.bench_tasks(300 if options.quick else 1000, options.quick, pairs=tasks.LIMIT_PAIRS)
    if sections.connection.vendor == "sqlite":  # then on PostgreSQL, where the tasks' 3x target is
        sections.on_postgres(["tasks-limit"], options.quick)


def _tasks_db(sections, options: Options) -> None:
    from bench import tasks

    pairs = tasks.db_pairs(sections.connection.vendor)
    # 3,000 tasks, not the tasks section's 1,000: Nightjar drains 1,000 on SQLite in ~0.5 s, a span
    # so short that two quiet runs ten minutes apart read 4.0x and 5.3x django-tasks-db.
    tasks.bench_tasks(300 if options.quick else 3000, options.quick, pairs=pairs)
    tasks.bench_pickup(["nightjar_db_1proc", "dtdb_1proc"], 40 if options.quick else 200)
    if sections.connection.vendor == "sqlite":  # then on PostgreSQL, in the same run
        sections.on_postgres(["tasks-db"], options.quick)


def _dbqueue(sections, options: Options) -> None:
    from bench import dbqueue

    dbqueue.bench_dbqueue(1000 if options.quick else 5000, options.quick)
    if sections.connection.vendor == "sqlite":  # then the same on PostgreSQL, in the same run
        sections.on_postgres(["dbqueue"], options.quick)


def _tasks_processes(sections, options: Options) -> None:
    from bench import tasks

    tasks.bench_tasks(300 if options.quick else 1000, options.quick, pairs=tasks.PROCESSES_PAIRS)
    if sections.connection.vendor == "sqlite":
        sections.on_postgres(["tasks-processes"], options.quick)


# In the order they run (whatever the order of --only).
SECTIONS: dict[str, Section] = {
    "raw": Section(lambda s, o: s.bench_raw(o.n), "a minimal pika + sqlite3 consumer: per delivery, and batches of 50"),
    "worker": Section(
        lambda s, o: s.bench_worker(o.n, o.processes),
        "Nightjar's worker (--serve) draining N registrations: 1 and 2 processes",
    ),
    "batch": Section(lambda s, o: s.bench_batch(o.n, o.processes), "Nightjar's worker --serve --batch 50"),
    "latency": Section(
        lambda s, o: s.bench_latency(100, 3 if o.quick else 20),
        "registrations at 100/s for 20 s: registration commit -> ticket commit",
    ),
    "web": Section(
        lambda s, o: s.bench_web(o.web_rates, o.web_seconds),
        "registration POSTs through gunicorn at fixed rates; RabbitMQ up and down",
    ),
    "memory": Section(
        lambda s, o: s.bench_memory(1000, 2000 if o.quick else 100_000),
        "the worker's resident memory after 1,000 and 100,000 deliveries",
    ),
    "backlog": Section(
        lambda s, o: s.bench_backlog(500 if o.quick else 10_000),
        "reconcile republishing 10,000 registrations left by an outage",
    ),
    "redis": Section(
        lambda s, o: s.bench_redis(o.n, o.web_rates, o.web_seconds),
        "the same raw ceilings, workers and web path on Redis Streams (a redis-server of its own)",
    ),
    "postgres": Section(
        lambda s, o: s.bench_postgres(o.quick, o.only),
        "the raw ceilings, workers (1, 2, 4 processes) and web path on PostgreSQL (a cluster of its own)",
    ),
    "desk": Section(
        lambda s, o: s.bench_desk(o.n),
        "what the operations desk costs the worker: its reports on and off, metrics per delivery",
    ),
    "names": Section(
        lambda s, o: s.bench_names(),
        "the name check on hostile names: the worst name a guest can send, and clusters() on\n"
        "10x the input within 30x the time (linear, with room for noise; quadratic would be 100x)",
    ),
    "pairs": Section(
        _pairs,
        "the targets' ratios measured pairwise: each run measures the raw ceilings and then the\n"
        "worker right after them (per delivery and batch; on Redis Streams too), so the machine's\n"
        "drift between minutes hits both alike; reported as the median of the per-run ratios",
    ),
    "tasks": Section(
        _tasks,
        "Django Tasks backends on a task that writes one row, SQLite then PostgreSQL: Nightjar's\n"
        "(per delivery and batch, 1 and 2 processes) against django-tasks-db 0.13, Celery 5.7\n"
        "(acks_late, prefork 2), procrastinate 3.10 (PostgreSQL only) and the raw ceiling, in\n"
        "pairs; tasks/s and µs per enqueue\n"
        "(only with --only tasks: not in the default run)",
        default=False,
    ),
    "dbqueue": Section(
        _dbqueue,
        "the database transport (db://default), SQLite then PostgreSQL: two raw SKIP LOCKED loops (sqlite3,\n"
        "psycopg; the work in plain SQL, and as tickets does it: the target's) against Nightjar's worker\n"
        "on it, per delivery, and the same worker on RabbitMQ; the pick-up latency, idle and at half\n"
        "load, beside RabbitMQ's and Redis's\n"
        "(only with --only dbqueue)",
        default=False,
    ),
    "tasks-db": Section(
        _tasks_db,
        "Nightjar's tasks on the database transport (db://default, no broker) against the backends that\n"
        "need nothing but the database: django-tasks-db, procrastinate (PostgreSQL), per delivery and\n"
        "batch 50, in pairs, SQLite then PostgreSQL (only with --only tasks-db)",
        default=False,
    ),
    "tasks-limit": Section(
        _tasks_limit,
        "what the tasks' time limit costs: Nightjar's tasks worker (per delivery, batch 50) with the\n"
        "alarm and without it, in pairs, as a ratio, SQLite then PostgreSQL (only with --only tasks-limit)",
        default=False,
    ),
    "tasks-processes": Section(
        _tasks_processes,
        "Nightjar's tasks worker as one command with --processes 2 against two workers started apart,\n"
        "in pairs, SQLite then PostgreSQL (only with --only tasks-processes)",
        default=False,
    ),
}


def description() -> str:
    lines = []
    for name, section in SECTIONS.items():
        first, *rest = section.help.split("\n")
        lines.append(f"  {name:<10} {first}")
        lines += [f"  {'':<10} {line}" for line in rest]
    return INTRO + "\n".join(lines) + "\n" + OUTRO


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bin/benchmark.py", description=description(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    names = list(SECTIONS)
    parser.add_argument(
        "--only", nargs="+", choices=names, default=[name for name, section in SECTIONS.items() if section.default]
    )
    parser.add_argument("--quick", action="store_true", help="Smaller N and 1 run each (a smoke test, not figures).")
    parser.add_argument("--json", default="benchmark.json", help="Where to write the figures (default benchmark.json).")
    parser.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2], help="Worker processes to measure (default 1 2)."
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="Runs of each paired measurement (default 3; 1 with --quick): more runs, a steadier median.",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="Another checkout (e.g. a git worktree of main): pairs also run its worker after this one's, "
        "and report this one's as a ratio of it.",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)  # before anything starts: --help leaves nothing behind
    random.seed(1)
    options = Options(
        n=1000 if args.quick else 20000,
        quick=args.quick,
        processes=tuple(args.processes),
        only=args.only,
        web_rates=[100, 400] if args.quick else [100, 200, 250, 300, 400, 500, 650, 800],
        web_seconds=2 if args.quick else 5,
    )
    with contextlib.ExitStack() as stack_, stack.signals_interrupt():
        folder = stack_.enter_context(stack.scratch_folder("nightjar-bench-", say))
        # The postgres section runs this benchmark again with NIGHTJAR_BENCH_DATABASE_URL
        # pointing at a PostgreSQL cluster of its own; otherwise a throwaway SQLite file.
        stack_.enter_context(
            stack.environment(
                DATABASE_URL=os.environ.get("NIGHTJAR_BENCH_DATABASE_URL") or f"sqlite:///{folder / 'bench.sqlite3'}",
                NIGHTJAR_QUEUE=f"nightjar.bench-{uuid.uuid4().hex[:8]}",
                NIGHTJAR_TASKS_QUEUE=f"nightjar.bench-tasks-{uuid.uuid4().hex[:8]}",
                DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "nightjar.settings"),
                NIGHTJAR_LOG_LEVEL="WARNING",
                NIGHTJAR_LOG_FORMAT="plain",
                NIGHTJAR_STATIC_ROOT=str(folder / "static"),  # not the checkout's (see bin/chaos_soak.py)
            )
        )
        if not os.environ.get("RABBITMQ_URL"):
            url, management = stack_.enter_context(stack.rabbitmq_node(folder / "rabbitmq"))
            stack_.enter_context(stack.environment(RABBITMQ_URL=url, RABBITMQ_MANAGEMENT_URL=management))

        import django

        django.setup()
        from bench import sections
        from nightjar_delivery import transport

        runs = args.runs or (1 if args.quick else 3)
        sections.configure(folder, runs=runs, before=args.before and args.before.resolve())
        say(sections.describe())
        sections.prepare_database()
        try:
            for name, section in SECTIONS.items():
                if name in args.only:
                    section.run(sections, options)
        finally:
            transport.delete_queues()
            transport.delete_queues(os.environ["NIGHTJAR_TASKS_QUEUE"])
    Path(args.json).write_text(json.dumps(sections.RESULTS, indent=2))
    say(f"Figures written to {args.json}")
    return 0


def say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
