"""Enqueue the demo's tasks and print what became of them.

manage.py demo                          four tasks, then their results as the worker finishes them
manage.py demo --visits N --ids FILE    N record_visit tasks, their result ids to FILE (the chaos soak)
manage.py demo --visits N --call URL    the same, each task first POSTing to URL with its Idempotency-Key
manage.py demo --report --ids FILE      one JSON line: the results' statuses and the Visit rows
"""

import json
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from demo.models import Visit
from demo.tasks import divide, record_visit, record_visit_and_call

try:
    from django.tasks import TaskResultStatus, default_task_backend
except ImportError:
    from django_tasks import TaskResultStatus, default_task_backend

FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


class Command(BaseCommand):
    help = "Enqueue the demo's tasks and print their results (or, for the chaos soak, enqueue many or report)."

    def add_arguments(self, parser):
        parser.add_argument("--wait", type=float, default=120, help="Seconds to wait for the results (default 120).")
        parser.add_argument("--visits", type=int, default=0, help="Enqueue this many record_visit tasks and exit.")
        parser.add_argument("--label", default="visit", help="With --visits: labels are LABEL-0, LABEL-1, ...")
        parser.add_argument(
            "--linger", type=float, default=0.0, help="With --visits: each task waits this long after its insert."
        )
        parser.add_argument(
            "--ids", type=Path, help="With --visits: append the result ids here; with --report: read them."
        )
        parser.add_argument(
            "--call", default="", help="With --visits: each task first POSTs to this URL (record_visit_and_call)."
        )
        parser.add_argument("--report", action="store_true", help="Print the statuses of the results in --ids as JSON.")

    def handle(self, *args, wait, visits, label, linger, ids, report, call, **options):
        if report:
            return self.report(ids)
        if visits:
            return self.enqueue_visits(visits, label, linger, ids, call)
        later = timezone.now() + timedelta(seconds=5)
        results = [
            ("record_visit('hello')", record_visit.enqueue("hello")),
            ("divide(6, 3)", divide.enqueue(6, 3)),
            ("divide(1, 0)", divide.enqueue(1, 0)),
            (
                "record_visit('five seconds later'), run_after +5 s",
                record_visit.using(run_after=later).enqueue("five seconds later"),
            ),
        ]
        for call, result in results:
            self.stdout.write(f"Enqueued {call}: {result.status}")
        self.stdout.write("Waiting for the worker...")
        deadline = time.monotonic() + wait
        for call, result in results:  # in the order enqueued, whatever order they finish in
            while True:
                result = default_task_backend.get_result(result.id)  # as another process sees it
                if result.status in FINISHED:
                    self.stdout.write(outcome(call, result))
                    break
                if time.monotonic() > deadline:
                    raise CommandError(f"{call} is still {result.status} after {wait:g} s. Is the worker running?")
                time.sleep(0.2)
        self.stdout.write(f"Visits in the database: {Visit.objects.count()}")

    def enqueue_visits(self, count, label, linger, ids, call=""):
        with open(ids, "a") if ids else open("/dev/null", "w") as out:
            for number in range(count):
                if call:
                    result = record_visit_and_call.enqueue(f"{label}-{number}", call, linger=linger)
                else:
                    result = record_visit.enqueue(f"{label}-{number}", linger=linger)
                out.write(result.id + "\n")
                out.flush()  # a kill of this process loses at most the id being written
        self.stdout.write(f"Enqueued {count} {'record_visit_and_call' if call else 'record_visit'} tasks")

    def report(self, ids):
        if not ids:
            raise CommandError("--report needs --ids FILE")
        statuses = Counter(str(default_task_backend.get_result(line).status) for line in ids.read_text().split())
        labels = Counter(Visit.objects.values_list("label", flat=True))
        self.stdout.write(
            json.dumps(
                {
                    "statuses": dict(statuses),
                    "visits": sum(labels.values()),
                    "labels": len(labels),
                    "duplicates": sum(n - 1 for n in labels.values() if n > 1),
                }
            )
        )


def outcome(call: str, result) -> str:
    if result.status == TaskResultStatus.SUCCESSFUL:
        return f"{call}: SUCCESSFUL, returned {result.return_value!r} (attempts: {result.attempts})"
    error = result.errors[-1] if result.errors else None
    last_line = error.traceback.strip().splitlines()[-1] if error and error.traceback else "no traceback"
    return f"{call}: FAILED after {result.attempts} attempt(s): {last_line}"
