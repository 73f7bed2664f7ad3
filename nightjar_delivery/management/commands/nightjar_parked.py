from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from nightjar_delivery import exits, reconcile
from nightjar_delivery.channel import Channel


class Command(BaseCommand):
    help = (
        "Parked deliveries: what used up its delivery limit and waits for a person. "
        "Listed by default; `collect` moves the broker's dead letters into the database "
        "(reconcile does this too); `requeue ID` publishes one again; `discard ID` gives up on it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        exits.add_channel_argument(parser)
        actions = parser.add_subparsers(dest="action", metavar="{list,collect,requeue,discard}")
        actions.add_parser("list", help="List parked deliveries waiting for staff (the default).")
        actions.add_parser("collect", help="Move the dead-letter queue into the database: record, then ack.")
        for name, what in (("requeue", "Publish it again"), ("discard", "Give up on it")):
            action = actions.add_parser(name, help=f"{what}; leaves a trace.")
            action.add_argument("code", help="The id `nightjar_parked` lists, as the channel writes it.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"] or "list"
        channel = exits.select_channel(options["channel"])
        with exits.exit_codes():
            if action == "collect":
                self.collect(channel)
            elif action == "requeue":
                intent = reconcile.requeue_parked(
                    channel, channel.find(options["code"]), actor=channel.actor("parked requeue")
                )
                self.stdout.write(f"Requeued {channel.label(intent.pk)}: it is pending again and is being published.")
            elif action == "discard":
                intent = reconcile.discard_parked(
                    channel, channel.find(options["code"]), actor=channel.actor("parked discard")
                )
                self.stdout.write(
                    f"Discarded {channel.label(intent.pk)}: it stays parked, without its {channel.outcome}."
                )
            else:
                self.show_list(channel)

    def collect(self, channel: Channel) -> None:
        report = reconcile.collect_dead_letters(channel)
        for code in report.parked:
            self.stdout.write(f"Parked {code}")
        for code in report.requeued:
            self.stdout.write(f"Requeued {code} (dead-lettered by interruptions alone)")
        self.stdout.write(
            f"Collected {len(report.parked) + len(report.requeued) + report.dropped + report.rejected} dead letters: "
            f"{len(report.parked)} parked, {len(report.requeued)} requeued, "
            f"{report.rejected} rejected messages, {report.dropped} already had their {channel.outcome}."
        )

    def show_list(self, channel: Channel) -> None:
        waiting = reconcile.parked_lines(channel)
        for line in waiting:
            self.stdout.write(line)
        self.stdout.write(f"{len(waiting)} parked deliveries wait for staff.")
