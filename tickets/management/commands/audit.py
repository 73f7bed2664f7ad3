from django.core.management.base import BaseCommand, CommandError

from tickets.services.audit import audit_invariants


class Command(BaseCommand):
    help = (
        "Check Nightjar's invariants: at most one ticket per registration, completion keys and tickets in "
        "pairs, ticket names equal to registration names, nothing pending for long, no more seats confirmed than "
        "the capacity, nobody waiting ahead of a later confirmed guest. Exits 1 on any violation."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--pending-older-than",
            type=float,
            default=300,
            metavar="SECONDS",
            help="Pending registrations older than this count as violations (default 300).",
        )

    def handle(self, *args, **options):
        report = audit_invariants(pending_older_than=options["pending_older_than"])
        for violation in report.violations:
            self.stdout.write(f"VIOLATION {violation}")
        dead = report.dead_lettered if report.dead_lettered is not None else f"unknown ({report.dead_lettered_error})"
        self.stdout.write(
            f"Waiting for staff: {report.parked} parked (`parked`), {dead} dead-lettered not yet collected"
        )
        if report.void_tickets:
            self.stdout.write(
                f"Void: {report.void_tickets} cancelled registrations hold a ticket made before the cancellation "
                "(it no longer downloads; the door answers it red)"
            )
        if not report.passed:
            raise CommandError(f"Audit failed: {len(report.violations)} kind(s) of violation.", returncode=1)
        self.stdout.write(f"Audit passed: {report.checked} registrations, every invariant holds.")
