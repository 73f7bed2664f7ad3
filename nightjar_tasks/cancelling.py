"""Cancelling a task that has not started: cancel_task() (from code:
nightjar_tasks.cancel), the admin's action and `nightjar_cancel_task` call it.

A cancelled task is FAILED, its last error a Cancelled entry saying who and
why, so get_result() and every surface already read it; its message, if any,
is acked by the worker without running it, and reconcile publishes only
READY tasks.

Against a worker claiming the task at that moment, exactly one wins: the
cancel changes the row only while it is READY, inside a transaction that
locks it (SQLite: the one write lock; PostgreSQL: the row, SELECT ... FOR
UPDATE), and the worker claims a task (inserts its completion key) only
while its row is not FAILED or SUCCESSFUL, in the same kind of lock
(nightjar_tasks/marks.py): whichever commits first, the other sees it. A
worker's uncommitted run leaves the row READY, so the cancel waits for its
commit, then finds it SUCCESSFUL (or READY again after a failed attempt, and
cancels the retry). A task with atomic=False runs its body outside any
transaction that could decide between the two: it is not cancelled."""

from django.db import transaction
from django.utils import timezone

from nightjar_delivery import DomainError
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord, TaskStaffAction


class Cancelled(Exception):
    """The error a cancelled task's result names (never raised)."""


class CannotCancel(DomainError):
    """The task is not waiting to run (or cannot be told apart from one running): the sentence says which."""


def task_id_of(task) -> int:
    """A TaskResult, its id, or a task's id (int or text)."""
    value = getattr(task, "id", task)
    try:
        return int(str(value).strip().removeprefix("task").strip())
    except ValueError:
        raise CannotCancel(f"{value!r} is not a task id.") from None


def cancel_task(*, task_id: int, actor: str, reason: str = "") -> TaskRecord:
    """Make a READY task FAILED as cancelled, with a trail (TaskStaffAction:
    actor, "cancel", reason) in the same transaction. Raises CannotCancel
    with a sentence: no such task, done or failed already, parked, or
    atomic=False. Returns the row as stored."""
    with transaction.atomic():
        row = TaskRecord.objects.select_for_update().filter(pk=task_id).first()
        if row is None:
            raise CannotCancel(f"There is no task {task_id}.")
        if row.status != TaskResultStatus.READY:
            raise CannotCancel(f"Task {task_id} is {row.status}: only a task waiting to run can be cancelled.")
        if TaskParked.objects.filter(task_id=task_id, resolution="").exists():
            raise CannotCancel(f"Task {task_id} is parked: discard it instead (`nightjar_parked discard {task_id}`).")
        if not row.atomic:
            raise CannotCancel(
                f"Task {task_id} runs with atomic=False: its body runs outside the transaction that could "
                "tell a cancel from a start, so it cannot be cancelled safely."
            )
        now = timezone.now()
        said = f"Cancelled by {actor} at {now:%Y-%m-%d %H:%M:%S %Z}" + (f": {reason}" if reason else ".")
        row.errors = [*row.errors, {"exception_class_path": f"{__name__}.Cancelled", "traceback": said}]
        row.status, row.finished_at = TaskResultStatus.FAILED, now
        row.save(update_fields=["status", "finished_at", "errors"])
        TaskStaffAction.objects.create(actor=actor[:150], action="cancel", task=row, detail=reason[:500])
    return row
