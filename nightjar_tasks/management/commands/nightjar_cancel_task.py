"""nightjar_cancel_task: cancel tasks that have not started (nightjar_tasks/cancelling.py)."""

from django.core.management.base import BaseCommand, CommandError

from nightjar_delivery import get_channel
from nightjar_tasks.cancelling import CannotCancel, cancel_task, task_id_of


class Command(BaseCommand):
    help = (
        "Cancel tasks waiting to run (READY): each becomes FAILED as cancelled and never runs; a worker claiming "
        "one at that moment runs it instead, and the cancel is refused. Exit status 1 when any is refused."
    )

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="+", metavar="ID", help="A task's id (its TaskResult's id).")
        parser.add_argument("--reason", default="", help="Why, kept in the staff trail.")

    def handle(self, *args, **options):
        actor = get_channel("tasks").actor("nightjar_cancel_task")  # (who, as every staff command records it)
        refused = 0
        for code in options["ids"]:
            try:
                record = cancel_task(task_id=task_id_of(code), actor=actor, reason=options["reason"])
            except CannotCancel as error:
                refused += 1
                self.stderr.write(str(error))
                continue
            self.stdout.write(f"Cancelled task {record.pk}.")
        if refused:
            raise CommandError(f"{refused} of {len(options['ids'])} task(s) not cancelled.", returncode=1)
