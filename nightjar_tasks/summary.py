"""What the desk, the metrics and the commands read about tasks: plain
queries over the task rows, per task path (the public read service of this
app; nothing here changes a row)."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.utils import timezone

from nightjar_tasks.cancelling import is_cancelled
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord


@dataclass(frozen=True)
class TaskPath:
    """One task path's totals. enqueued = done + failed + waiting; parked
    counts the failed ones waiting for staff (requeue or discard); latency is enqueue → finish of the
    done ones (seconds, summed, for an average or a Prometheus summary). Of
    the waiting ones, `scheduled` wait for their time (run_after: deferred,
    or a retry's backoff) and `lost` are due and READY past the grace period
    without a publish since (a lost publish: reconcile publishes them)."""

    task_path: str
    enqueued: int
    done: int
    failed: int
    waiting: int
    parked: int
    latency_seconds: float
    scheduled: int = 0
    lost: int = 0

    @property
    def average_latency(self) -> float | None:
        return self.latency_seconds / self.done if self.done else None


GRACE_SECONDS = 60  # reconcile's default grace period (`reconcile --older-than`)


def by_task_path(*, grace_seconds: float = GRACE_SECONDS) -> list[TaskPath]:
    """Every task path with at least one task row, by path."""
    done = Q(status=TaskResultStatus.SUCCESSFUL)
    now = timezone.now()
    ready = Q(status=TaskResultStatus.READY)
    scheduled = ready & Q(run_after__gt=now)
    due = ready & (Q(run_after__isnull=True) | Q(run_after__lte=now))
    # Due but not handed to the broker since the grace period (a retry's backoff
    # over, never published since, counts from its due time).
    lost = due & (
        Q(published_at__lte=now - timedelta(seconds=grace_seconds))
        | Q(published_at__isnull=True, run_after__isnull=True, enqueued_at__lte=now - timedelta(seconds=grace_seconds))
        | Q(published_at__isnull=True, run_after__lte=now - timedelta(seconds=grace_seconds))
    )
    # A parked task waits for staff, not for reconcile (a row parked READY before issue 51 included).
    lost &= ~Q(pk__in=TaskParked.objects.holding().filter(task__isnull=False).values("task"))
    rows = (
        TaskRecord.objects.order_by()
        .values("task_path")
        .annotate(
            enqueued=Count("pk"),
            done=Count("pk", filter=done),
            failed=Count("pk", filter=Q(status=TaskResultStatus.FAILED)),
            scheduled=Count("pk", filter=scheduled),
            lost=Count("pk", filter=lost),
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
            scheduled=row["scheduled"],
            lost=row["lost"],
        )
        for row in rows
    ]


def audit() -> list[str]:
    """The promise checked row by row, one sentence per violation: a
    SUCCESSFUL task has its completion key, and a completion key belongs to
    a SUCCESSFUL task (a key without SUCCESSFUL would make a repeat skip a
    task whose result was never recorded), or to a cancelled one (there the
    key is what keeps it from running: nightjar_tasks/cancelling.py)."""
    done = TaskRecord.objects.filter(status=TaskResultStatus.SUCCESSFUL)
    problems = [
        f"task {pk} ({path}) is SUCCESSFUL without its completion key"
        for pk, path in done.filter(completion__isnull=True).values_list("pk", "task_path")
    ]
    problems += [
        f"task {pk} ({path}) has a completion key but is {status}"
        for pk, path, status, errors in TaskRecord.objects.filter(completion__isnull=False)
        .exclude(status=TaskResultStatus.SUCCESSFUL)
        .values_list("pk", "task_path", "status", "errors")
        if not (status == TaskResultStatus.FAILED and is_cancelled(errors))  # a cancel keeps the key: never runs
    ]
    return problems
