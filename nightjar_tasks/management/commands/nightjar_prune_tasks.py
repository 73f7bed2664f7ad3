"""nightjar_prune_tasks: delete the rows of finished tasks (SUCCESSFUL, or
FAILED and no longer waiting for staff) older than --days, in batches
(nightjar_tasks/pruning.py)."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from nightjar_delivery import exits
from nightjar_tasks import pruning


class Command(BaseCommand):
    help = (
        "Delete finished task results older than --days (default 30), --batch-size at a time, "
        "each batch its own short transaction."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=float, default=30, help="Keep results finished within this many days.")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=pruning.BATCH_SIZE,
            help=f"Rows per transaction (default {pruning.BATCH_SIZE}).",
        )

    def handle(self, *args, **options):
        if options["days"] < 0:
            raise CommandError("--days must not be negative.", returncode=exits.USAGE)
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.", returncode=exits.USAGE)
        try:
            deleted = pruning.prune_finished(
                older_than=timedelta(days=options["days"]), batch_size=options["batch_size"]
            )
        except KeyboardInterrupt:
            raise CommandError(
                "Interrupted: the batches committed so far stay deleted.", returncode=exits.INTERRUPTED
            ) from None
        self.stdout.write(f"Deleted {deleted} finished task results older than {options['days']:g} days.")
