"""What the desk, the metrics and the commands read about tasks: plain
queries over the task rows, per task path (the public read service of this
app; nothing here changes a row)."""

from dataclasses import dataclass

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum

from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord


@dataclass(frozen=True)
class TaskPath:
    """One task path's totals. enqueued = done + failed + waiting; parked
    counts the failed ones waiting for staff (requeue or discard); latency is enqueue → finish of the
    done ones (seconds, summed, for an average or a Prometheus summary)."""

    task_path: str
    enqueued: int
    done: int
    failed: int
    waiting: int
    parked: int
    latency_seconds: float

    @property
    def average_latency(self) -> float | None:
        return self.latency_seconds / self.done if self.done else None


def by_task_path() -> list[TaskPath]:
    """Every task path with at least one task row, by path."""
    done = Q(status=TaskResultStatus.SUCCESSFUL)
    rows = (
        TaskRecord.objects.order_by()
        .values("task_path")
        .annotate(
            enqueued=Count("pk"),
            done=Count("pk", filter=done),
            failed=Count("pk", filter=Q(status=TaskResultStatus.FAILED)),
            latency=Sum(
                ExpressionWrapper(F("finished_at") - F("enqueued_at"), output_field=DurationField()), filter=done
            ),
        )
        .order_by("task_path")
    )
    parked = dict(
        TaskParked.objects.filter(resolution="", task__isnull=False)
        .order_by()
        .values("task__task_path")
        .annotate(n=Count("pk"))
        .values_list("task__task_path", "n")
    )
    return [
        TaskPath(
            task_path=row["task_path"],
            enqueued=row["enqueued"],
            done=row["done"],
            failed=row["failed"],
            waiting=row["enqueued"] - row["done"] - row["failed"],
            parked=parked.get(row["task_path"], 0),
            latency_seconds=row["latency"].total_seconds() if row["latency"] else 0.0,
        )
        for row in rows
    ]


def audit() -> list[str]:
    """The promise checked row by row, one sentence per violation: a
    SUCCESSFUL task has its completion key, and a completion key belongs to
    a SUCCESSFUL task (a key without SUCCESSFUL would make a repeat skip a
    task whose result was never recorded)."""
    done = TaskRecord.objects.filter(status=TaskResultStatus.SUCCESSFUL)
    problems = [
        f"task {pk} ({path}) is SUCCESSFUL without its completion key"
        for pk, path in done.filter(completion__isnull=True).values_list("pk", "task_path")
    ]
    problems += [
        f"task {pk} ({path}) has a completion key but is {status}"
        for pk, path, status in TaskRecord.objects.filter(completion__isnull=False)
        .exclude(status=TaskResultStatus.SUCCESSFUL)
        .values_list("pk", "task_path", "status")
    ]
    return problems
