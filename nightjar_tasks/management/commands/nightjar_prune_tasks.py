"""prune_tasks: delete the rows of finished tasks (SUCCESSFUL, or FAILED and
no longer waiting for staff) older than --days."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from nightjar_delivery import exits
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord


class Command(BaseCommand):
    help = "Delete finished task results older than --days (default 30)."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=float, default=30, help="Keep results finished within this many days.")

    def handle(self, *args, **options):
        if options["days"] < 0:
            raise CommandError("--days must not be negative.", returncode=exits.USAGE)
        cutoff = timezone.now() - timedelta(days=options["days"])
        waiting = TaskParked.objects.filter(resolution="", task__isnull=False).values("task")
        old = TaskRecord.objects.filter(
            status__in=[TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED], finished_at__lt=cutoff
        ).exclude(pk__in=waiting)
        deleted = old.delete()[1].get(TaskRecord._meta.label, 0)
        self.stdout.write(f"Deleted {deleted} finished task results older than {options['days']:g} days.")
