from django.core.management.base import BaseCommand, CommandError

from tickets import broker, services


class Command(BaseCommand):
    help = (
        "Republish registrations that have no completion yet and are older than a grace period, oldest first. "
        "Safe at any time: the worker makes no second ticket."
    )

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=100, help="At most this many per run (default 100).")
        parser.add_argument(
            "--older-than", type=float, default=60, metavar="SECONDS", help="Grace period in seconds (default 60)."
        )

    def handle(self, *args, **options):
        if options["limit"] < 1 or options["older_than"] < 0:
            raise CommandError("--limit must be at least 1 and --older-than not negative.", returncode=2)
        try:
            published, remaining = services.reconcile_registrations(
                limit=options["limit"], older_than=options["older_than"]
            )
        except broker.BrokerError as error:
            raise CommandError(f"Stopped: {error}", returncode=3) from None
        for code in published:
            self.stdout.write(f"Republished {code}")
        self.stdout.write(f"Republished {len(published)}; {remaining} pending remain beyond this batch.")
