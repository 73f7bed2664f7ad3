import argparse
import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from classroom import verdicts, verify
from nightjar_delivery import exits
from tickets import handlers


class Command(BaseCommand):
    help = (
        "Prove a handler safe: run it, unmodified, in real worker processes killed at each checkpoint, "
        "on a disposable database and a queue of its own, and print PASS/FAIL per scenario."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--handler", help="Dotted path or .py file (default: what `worker` would use, see its --handler)."
        )
        # Set by the command itself for the child process that runs the scenarios.
        parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
        # With --inside: the file the parent reads each verdict from (classroom/verdicts.py).
        parser.add_argument("--verdicts", default=os.devnull, help=argparse.SUPPRESS)

    def handle(self, *args, **options):
        handler = options["handler"] or handlers.default_handler()
        with exits.exit_codes():
            handlers.load_handler(handler)
        if options["inside"]:
            self.run_scenarios(handler, options["verdicts"])
            return
        self.stdout.write(f"Verifying {handlers.shown(handler)} on a disposable database and queue...")
        status = verify.run_isolated(handler, say=self.stdout.write)
        if status != 0:
            raise CommandError(f"{handlers.shown(handler)} is not safe: see the FAIL lines above.", returncode=1)

    def run_scenarios(self, handler: str, written: str) -> None:
        database = str(settings.DATABASES["default"]["NAME"])
        # Guard: the scenarios write rows and kill workers; only ever on the throwaway pair.
        if "nightjar-verify-" not in database or not settings.NIGHTJAR_QUEUE.startswith("nightjar.verify-"):
            raise CommandError("--inside runs only on verify_handler's disposable database and queue.", returncode=2)
        try:
            with exits.exit_codes(broker=""):
                scenarios = verify.Scenarios(
                    handler, say=self.stdout.write, record=lambda verdict: verdicts.write(written, verdict)
                )
                ok = scenarios.run_all()
        finally:
            os.remove(database)
        if not ok:
            raise SystemExit(1)  # the FAIL lines already say why
