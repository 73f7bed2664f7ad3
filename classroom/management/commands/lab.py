import sys

from django.core.management.base import BaseCommand, CommandError

from classroom import lab
from delivery import exits
from tickets import handlers
from tickets.services.demo import reset_demo


class Command(BaseCommand):
    help = (
        "The learner's exercise (lab mode only). `lab start` makes your handler file, lab/handler.py, which the "
        "worker then uses; `lab check` grades it (disposable database and queue, then your real data, read only); "
        "`lab reset` puts the demo back, keeping Mina Patel."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", metavar="{start,check,reset}", required=True)
        start = actions.add_parser("start", help="Create lab/handler.py with the starting (unsafe) version.")
        start.add_argument("--force", action="store_true", help="Overwrite an existing lab/handler.py.")
        start.add_argument(
            "--step",
            type=int,
            choices=sorted(lab.STEP_FILES),
            default=1,
            help="Jump to step N of docs/lab.md: write the handler that step runs (tickets/lab_files/). "
            "Your registrations are not changed.",
        )
        actions.add_parser("check", help="Grade the handler and the exercise's data; PASS/FAIL per check.")
        reset = actions.add_parser(
            "reset", help="Delete every registration but Mina Patel's and forget the workers' reports, after asking."
        )
        reset.add_argument("--yes", action="store_true", help="Do not ask.")

    def handle(self, *args, **options):
        with exits.exit_codes():
            handlers.require_lab_mode()
            getattr(self, f"do_{options['action']}")(options)

    def do_start(self, options):
        step = options["step"]
        path = lab.start(force=options["force"], step=step)
        what = {
            1: "It acks first, then writes the ticket: not safe yet.",
            2: "It acks after the commit; no completion key yet: not safe yet.",
            3: "The completion key and the ticket in one transaction, the ack after the commit.",
        }[step]
        source = f" (a copy of tickets/lab_files/{lab.STEP_FILES[step].name})" if step > 1 else ""
        self.stdout.write(f"Your handler is {handlers.shown(str(path))}{source}. {what}")
        self.stdout.write("In lab mode `python manage.py worker` now runs it (NIGHTJAR_HANDLER or --handler override).")
        if step > 1:
            self.stdout.write(f"Data: {lab.data_now()}")
        # Both guides: the command cannot know which one the learner reads.
        self.stdout.write(
            f"Next: step {step} of docs/lab.md (in Russian: docs/lab.ru.md). "
            "When you think it is safe: python manage.py lab check"
        )

    def do_check(self, options):
        handler = handlers.default_handler()
        self.stdout.write(
            f"Checking {handlers.shown(handler)} on a disposable database and queue, then your data (read only)..."
        )
        checks = lab.grade(handler, decided=lambda check: (self.stdout.write(check.line()), self.stdout.flush()))
        failed = sum(not check.passed for check in checks)
        if failed:
            raise CommandError(f"{failed} of {len(checks)} checks failed: see the FAIL lines above.", returncode=1)
        self.stdout.write(f"All {len(checks)} checks passed: your handler is safe and the exercise is complete.")

    def do_reset(self, options):
        if not options["yes"]:
            if not sys.stdin.isatty():
                raise CommandError(
                    "lab reset deletes data: run it in a terminal to confirm, or add --yes.", returncode=2
                )
            answer = input(
                "This deletes every registration except Mina Patel's (R-0001), with their tickets, empties the "
                "queue and forgets the workers' reports. Type yes to go on: "
            )
            if answer.strip().lower() != "yes":
                self.stdout.write("Nothing was deleted.")
                return
        deleted = reset_demo()
        self.stdout.write(f"Deleted {deleted} registrations; Mina Patel (R-0001) and her ticket are back; queue empty.")
