from django.core.management.base import BaseCommand, CommandError

from delivery import transport
from tickets import services


class Command(BaseCommand):
    help = "Publish a new delivery of an existing registration (the worker makes no second ticket)."

    def add_arguments(self, parser):
        parser.add_argument("code", help="Registration ID, e.g. R-0003.")

    def handle(self, *args, **options):
        try:
            registration = services.retry_registration(code=options["code"], actor=services.command_line_actor("retry"))
        except services.NightjarError as error:
            raise CommandError(str(error), returncode=1) from None
        except transport.BrokerError as error:
            raise CommandError(f"Not published: {error}", returncode=3) from None
        self.stdout.write(f"Published a new delivery of {registration.code} ({registration.name}).")
