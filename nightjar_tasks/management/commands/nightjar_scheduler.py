"""nightjar_scheduler: enqueue the tasks NIGHTJAR_TASKS_SCHEDULE declares,
one per slot however many schedulers run (nightjar_tasks/schedules.py)."""

import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from nightjar_delivery import exits
from nightjar_tasks import schedules

logger = logging.getLogger("nightjar_tasks.schedules")

LONGEST_SLEEP = 30.0  # seconds: a pass at least this often (a clock that jumped, settings' slots anew)


class Command(BaseCommand):
    help = (
        "Enqueue each schedule's latest slot (NIGHTJAR_TASKS_SCHEDULE) once, then sleep until the next slot; "
        "until SIGTERM or Ctrl+C. Several may run: each slot is one task. Slots missed while none ran are skipped: "
        "the latest runs once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--list", action="store_true", help="List the schedules and their next slots; change nothing."
        )

    def handle(self, *args, **options):
        try:
            found = schedules.all_schedules()
        except ValueError as error:
            raise CommandError(str(error), returncode=exits.USAGE) from None
        if options["list"]:
            self.list(found)
            return
        if not found:
            raise CommandError(f"No schedules: {schedules.SETTING} is empty.", returncode=exits.USAGE)
        stop = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())  # the handler only sets the flag
        while not stop.is_set():
            try:
                self.take_one()
            except DatabaseError:  # (the database away for a while: the next pass tries again)
                logger.exception("A scheduler pass failed; trying again at the next slot")
            if options["once"]:
                return
            now = timezone.now()
            wake = min(schedule.following(now) for schedule in found)
            stop.wait(min(max((wake - now).total_seconds(), 0.0), LONGEST_SLEEP))
        self.stdout.write("Stopped.")

    def take_one(self) -> None:
        close_old_connections()
        for slot in schedules.enqueue_due():
            self.stdout.write(
                f"Enqueued task {slot.task_id} ({slot.schedule.name}, slot {slot.at:%Y-%m-%d %H:%M:%S} UTC)."
            )

    def list(self, found) -> None:
        if not found:
            self.stdout.write(f"No schedules: {schedules.SETTING} is empty.")
        now = timezone.now()
        for schedule in found:
            self.stdout.write(
                f"{schedule.name}: {schedule.task_path}, {schedule.rule}; next slot "
                f"{schedule.following(now):%Y-%m-%d %H:%M:%S} UTC"
            )
