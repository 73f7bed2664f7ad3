from django.core.management.base import BaseCommand

from nightjar_delivery import exits
from tickets.services.demo import seed_demo


class Command(BaseCommand):
    help = "Load the demo data: Mina Patel (R-0001) with her ticket. Running it again changes nothing."

    def handle(self, *args, **options):
        with exits.exit_codes():
            registration, created = seed_demo()
        verb = "Loaded" if created else "Already there:"
        self.stdout.write(f"{verb} {registration.code} {registration.name} with her ticket.")
