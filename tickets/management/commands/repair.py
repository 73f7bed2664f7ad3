from django.core.management.base import BaseCommand

from nightjar_delivery import actor, exits
from tickets.services.repair import plan_repair, repair_registration


class Command(BaseCommand):
    help = "Show how to repair a registration's duplicate tickets; with --apply, do it in one transaction."

    def add_arguments(self, parser):
        parser.add_argument("code", help="Registration ID, e.g. R-0002.")
        parser.add_argument("--apply", action="store_true", help="Apply the plan (otherwise nothing changes).")

    def handle(self, *args, **options):
        with exits.exit_codes():
            if options["apply"]:
                plan = repair_registration(code=options["code"], actor=actor(command="repair --apply"))
            else:
                plan = plan_repair(code=options["code"])
        for line in plan.lines():
            self.stdout.write(line)
        if plan.applied:
            self.stdout.write(
                f"Applied: {len(plan.delete)} ticket(s) deleted; {plan.registration.code} has one ticket."
            )
        else:
            self.stdout.write("Nothing changed. Run again with --apply to do it.")
