"""`python -m bench.peers enqueue N [--celery | --procrastinate]`: enqueue N
trivial tasks with this process's backend (Django's TASKS, Celery with
--celery, procrastinate's defer() with --procrastinate, under
bench.peers.settings_procrastinate), one call each outside any transaction,
as an application would; prints
{"seconds": ..., "cpu_seconds": ...} (the N calls, not the start-up) as JSON.
With --gap SECONDS the calls are that far apart, and "calls" lists each
call's start (time.time(), the clock the task's row is written with): the
pick-up latency is the row's time minus its call's start.

`python -m bench.peers worker-without-time-limit worker ARGS...`: `manage.py
worker ARGS...` with nightjar_tasks' time limit disarmed (the reference of
the tasks-limit section: what the alarm costs per task)."""

import argparse
import json
import sys
import time


def worker_without_time_limit(argv: list[str]) -> int:
    import contextlib

    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from nightjar_tasks import limits

    limits.Limit = lambda *args, **kwargs: contextlib.nullcontext()  # the runner looks it up per task
    execute_from_command_line(["manage.py", *argv])
    return 0


def main() -> int:
    if sys.argv[1:2] == ["worker-without-time-limit"]:
        return worker_without_time_limit(sys.argv[2:])
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("action", choices=["enqueue"])
    parser.add_argument("n", type=int)
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--celery", action="store_true")
    kind.add_argument("--procrastinate", action="store_true")
    parser.add_argument("--gap", type=float, default=0.0)
    args = parser.parse_args()
    if args.celery:
        from bench.peers.celery_app import write_row

        call = write_row.delay
    elif args.procrastinate:
        import django

        django.setup()
        from bench.peers.procrastinate_tasks import write_row

        def call(n: int) -> None:
            write_row.defer(n=n)  # (procrastinate's arguments are keywords)
    else:
        import django

        django.setup()
        from bench.peers.tasks import write_row

        call = write_row.enqueue
    call(-1)  # the first call opens the connections: not the steady state
    started, cpu, calls = time.perf_counter(), time.process_time(), []
    for i in range(args.n):
        if args.gap:
            time.sleep(args.gap)
            calls.append(time.time())
        call(i)
    # cpu_seconds: the process's CPU time, its threads' too (a publisher thread's work is the enqueue's cost)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "calls": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
