from django.core.management.base import BaseCommand, CommandError

from door import services
from nightjar_delivery import actor


class Command(BaseCommand):
    help = "Undo a check-in made by mistake; the reason goes on the registration's history."

    def add_arguments(self, parser):
        parser.add_argument("ticket", help="Ticket number, e.g. T-0001.")
        parser.add_argument("--reason", required=True, help="Why, in a sentence (kept on the history).")

    def handle(self, *args, **options):
        try:
            check_in = services.undo_check_in(
                ticket=options["ticket"], actor=actor(command="undo_check_in"), reason=options["reason"]
            )
        except services.DoorError as error:
            raise CommandError(str(error), returncode=1) from None
        self.stdout.write(
            f"Undid the check-in of {check_in.ticket.number} ({check_in.ticket.name}); it is valid again."
        )
