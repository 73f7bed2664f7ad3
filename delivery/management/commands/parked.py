from django.core.management.base import BaseCommand

from delivery import channel, exits


class Command(BaseCommand):
    help = (
        "Parked deliveries: what used up its delivery limit and waits for a person. "
        "`parked` lists them; `parked collect` moves the broker's dead letters into the database "
        "(reconcile does this too); `parked requeue R-0003` publishes one again; `parked discard R-0003` gives up on it."
    )

    def add_arguments(self, parser):
        exits.add_channel_argument(parser)
        actions = parser.add_subparsers(dest="action", metavar="{list,collect,requeue,discard}")
        actions.add_parser("list", help="List parked deliveries waiting for staff (the default).")
        actions.add_parser("collect", help="Move the dead-letter queue into the database: record, then ack.")
        for name, what in (("requeue", "Publish it again"), ("discard", "Give up on it")):
            action = actions.add_parser(name, help=f"{what}; leaves a trace.")
            action.add_argument("code", help="Registration ID, e.g. R-0003.")

    def handle(self, *args, **options):
        action = options["action"] or "list"
        user = exits.select_channel(options["channel"])
        with exits.exit_codes():
            if action == "collect":
                self.collect()
            elif action == "requeue":
                code = user.requeue_parked(code=options["code"], actor=user.actor("parked requeue"))
                self.stdout.write(f"Requeued {code}: it is pending again and is being published.")
            elif action == "discard":
                code = user.discard_parked(code=options["code"], actor=user.actor("parked discard"))
                self.stdout.write(f"Discarded {code}: it stays parked, without a ticket.")
            else:
                self.show_list()

    def collect(self):
        report = channel.current().collect_dead_letters()
        for code in report.parked:
            self.stdout.write(f"Parked {code}")
        for code in report.requeued:
            self.stdout.write(f"Requeued {code} (dead-lettered by interruptions alone)")
        self.stdout.write(
            f"Collected {len(report.parked) + len(report.requeued) + report.dropped + report.rejected} dead letters: "
            f"{len(report.parked)} parked, {len(report.requeued)} requeued, "
            f"{report.rejected} rejected messages, {report.dropped} already had their ticket."
        )

    def show_list(self):
        waiting = channel.current().parked_lines()
        for line in waiting:
            self.stdout.write(line)
        self.stdout.write(f"{len(waiting)} parked deliveries wait for staff.")
