from django.core.management.base import BaseCommand

from nightjar_delivery import actor, exits
from tickets.services import seats
from tickets.services.registrations import find_registration


class Command(BaseCommand):
    help = (
        "The evening's seats: capacity, seats taken and free, the waiting list. --capacity N sets it (none: room "
        "for everyone; raising it promotes waiting guests in order; it cannot go below the seats taken); "
        "--cancel R-0003 --reason TEXT cancels a registration (its seat goes to the first waiting guest)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--capacity", metavar="N", help="Seats for the evening, or 'none' for room for everyone.")
        parser.add_argument("--cancel", metavar="R-0003", help="Cancel this registration (needs --reason).")
        parser.add_argument("--reason", default="", help="Why (kept in the staff trail).")

    def handle(self, *args, **options):
        with exits.exit_codes():
            if options["capacity"] is not None:
                text = options["capacity"].strip()
                capacity = None if text.lower() == "none" else seats.parse_capacity(text)
                if text.lower() != "none" and capacity is None:
                    raise seats.CapacityRefused("Give a number of seats, or 'none' for room for everyone.")
                promoted = seats.set_capacity(capacity=capacity, actor=actor(command="seats"))
                if promoted:
                    self.stdout.write(f"Seats given to {', '.join(r.code for r in promoted)}.")
            if options["cancel"]:
                if not options["reason"].strip():
                    raise exits.UsageError("Say why with --reason; nothing was cancelled.")
                registration = find_registration(code=options["cancel"])
                done = seats.cancel_registration(
                    registration=registration, actor=actor(command="seats"), reason=options["reason"]
                )
                given = ", ".join(r.code for r in done.promoted)
                self.stdout.write(f"{registration.code} cancelled" + (f"; its seat went to {given}." if given else "."))
        counts = seats.seat_counts()
        room = "room for everyone" if counts.capacity is None else f"capacity {counts.capacity}"
        free = "" if counts.free is None else f", {counts.free} free"
        self.stdout.write(
            f"Seats: {room}, {counts.confirmed} taken{free}  waiting: {counts.waiting}  cancelled: {counts.cancelled}"
        )
