"""Cancelling a task that has not started: cancel_task() (from code:
nightjar_tasks.cancel), the admin's action and `nightjar_cancel_task` call it.

A cancelled task is FAILED, its last error a Cancelled entry saying who and
why, so get_result() and every surface already read it; its message, if any,
is acked by the worker without running it, and reconcile publishes only
READY tasks.

Against a worker claiming the task at that moment, exactly one wins, by the
lock a worker already takes: the task's completion key. The cancel inserts
the key first, as a claim does; a worker's uncommitted claim makes it wait
for that worker's commit (PostgreSQL's unique index; SQLite's one writer),
and then the key is there: the task ran, the cancel is refused. The key
inserted, the cancel marks the row (locked, and READY still) and commits;
a worker's claim after it finds the key and runs nothing, per delivery and
in batches. So a cancelled task keeps its key (summary.audit knows it). The
worker's hot path is unchanged. A task with atomic=False runs its body
before it takes its key: it is not cancelled."""

from django.db import transaction
from django.utils import timezone

from nightjar_delivery import DomainError
from nightjar_tasks import marks
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
        _refuse_unless_waiting(task_id, TaskRecord.objects.filter(pk=task_id).first())
        # The key before the row's lock, in the order a worker takes them (no deadlock).
        if not marks.insert_key(task_id):
            status = TaskRecord.objects.filter(pk=task_id).values_list("status", flat=True).first()
            raise CannotCancel(f"Task {task_id} is {status}: a worker claimed it first.")
        row = TaskRecord.objects.select_for_update().get(pk=task_id)
        _refuse_unless_waiting(task_id, row)  # (a failed attempt's record may have come meanwhile)
        now = timezone.now()
        said = f"Cancelled by {actor} at {now:%Y-%m-%d %H:%M:%S %Z}" + (f": {reason}" if reason else ".")
        row.errors = [*row.errors, {"exception_class_path": f"{__name__}.Cancelled", "traceback": said}]
        row.status, row.finished_at = TaskResultStatus.FAILED, now
        row.save(update_fields=["status", "finished_at", "errors"])
        TaskStaffAction.objects.create(actor=actor[:150], action="cancel", task=row, detail=reason[:500])
    return row


def _refuse_unless_waiting(task_id: int, row: TaskRecord | None) -> None:
    if row is None:
        raise CannotCancel(f"There is no task {task_id}.")
    if row.status != TaskResultStatus.READY:
        raise CannotCancel(f"Task {task_id} is {row.status}: only a task waiting to run can be cancelled.")
    if TaskParked.objects.filter(task_id=task_id, resolution="").exists():
        raise CannotCancel(f"Task {task_id} is parked: discard it instead (`nightjar_parked discard {task_id}`).")
    if not row.atomic:
        raise CannotCancel(
            f"Task {task_id} runs with atomic=False: its body runs before it takes the key that could "
            "tell a cancel from a start, so it cannot be cancelled safely."
        )


def is_cancelled(errors: list) -> bool:
    """Whether a task's errors say it was cancelled (its last one)."""
    return bool(errors) and errors[-1].get("exception_class_path") == f"{__name__}.Cancelled"
