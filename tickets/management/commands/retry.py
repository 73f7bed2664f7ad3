from django.core.management.base import BaseCommand

from nightjar_delivery import actor, exits
from tickets.services.registrations import retry_registration


class Command(BaseCommand):
    help = "Publish a new delivery of an existing registration (the worker makes no second ticket)."

    def add_arguments(self, parser):
        parser.add_argument("code", help="Registration ID, e.g. R-0003.")

    def handle(self, *args, **options):
        with exits.exit_codes(broker="Not published: "):
            registration = retry_registration(code=options["code"], actor=actor(command="retry"))
        self.stdout.write(f"Published a new delivery of {registration.code} ({registration.name}).")
