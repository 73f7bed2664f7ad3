from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nightjar_delivery import exits, reconcile

SHOWN = 50  # codes listed one per line; a backlog of thousands is summed up


class Command(BaseCommand):
    help = (
        "Republish the channel's intents that are not done yet and are older than a grace period, oldest first, "
        "in passes of --limit while each pass is full. First moves dead-lettered deliveries into the database "
        "(parked for staff, or requeued when only interruptions used up their limit). "
        "Safe at any time: the worker makes no second outcome."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit", type=int, default=100, help="At most this many per pass (default 100); full passes repeat."
        )
        parser.add_argument(
            "--older-than", type=float, default=60, metavar="SECONDS", help="Grace period in seconds (default 60)."
        )
        exits.add_channel_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1 or options["older_than"] < 0:
            raise CommandError("--limit must be at least 1 and --older-than not negative.", returncode=exits.USAGE)
        channel = exits.select_channel(options["channel"])
        with exits.exit_codes():
            report = reconcile.reconcile(
                channel, limit=options["limit"], older_than=options["older_than"], actor=channel.actor("reconcile")
            )
        collected = report.collected
        for code in collected.parked:
            self.stdout.write(f"Parked {code}: its delivery failed until the delivery limit (see `nightjar_parked`)")
        for code in collected.requeued:
            self.stdout.write(f"Requeued {code}: dead-lettered by interruptions alone, no failure recorded")
        for code in report.published[:SHOWN]:
            self.stdout.write(f"Republished {code}")
        if len(report.published) > SHOWN:
            self.stdout.write(f"... and {len(report.published) - SHOWN} more")
        self.stdout.write(
            f"Republished {len(report.published)}; {report.remaining} pending remain beyond this batch "
            f"({report.passes} pass(es) of at most {options['limit']})."
        )
