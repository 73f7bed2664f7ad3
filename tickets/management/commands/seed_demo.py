from django.core.management.base import BaseCommand, CommandError

from tickets import services


class Command(BaseCommand):
    help = "Load the demo data: Mina Patel (R-0001) with her ticket. Running it again changes nothing."

    def handle(self, *args, **options):
        try:
            registration, created = services.seed_demo()
        except services.NightjarError as error:
            raise CommandError(str(error), returncode=1) from None
        verb = "Loaded" if created else "Already there:"
        self.stdout.write(f"{verb} {registration.code} {registration.name} with her ticket.")
