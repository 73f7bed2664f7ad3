"""One row per enqueued task (TaskRecord: the TaskResult's id is its key),
its completion key, and the engine's records (nightjar_delivery/records.py) for the
tasks channel, each in its own table with a foreign key to the task."""

import secrets

from django.db import models
from django.utils import timezone

from nightjar_delivery import (
    AbstractDeliveryFailure,
    AbstractParkedDelivery,
    AbstractRedelivery,
    AbstractRejectedMessage,
    AbstractWorkerReport,
)
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.messages import MAX_TASK_ID


def new_task_id() -> int:
    """A task's id, which is its TaskResult's id: random (~60 bits), so never
    given again to another task (a rolled-back enqueue's id included) and not
    guessed from another's; at most 18 digits, as a task message may name."""
    return secrets.randbelow(MAX_TASK_ID) + 1


class TaskRecordQuerySet(models.QuerySet):
    def unfinished(self):
        return self.filter(status__in=[TaskResultStatus.READY, TaskResultStatus.RUNNING])


class TaskRecord(models.Model):
    """A task as enqueued, and what became of it. Written in the caller's
    transaction; the worker marks it done in the same transaction as the
    task's own writes."""

    STATUSES = [(status.value, status.label) for status in TaskResultStatus]

    id = models.BigIntegerField(primary_key=True, default=new_task_id, editable=False)
    task_path = models.CharField(max_length=300)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    queue_name = models.CharField(max_length=100, default="default")
    backend = models.CharField(max_length=100, default="default")
    priority = models.IntegerField(default=0)
    takes_context = models.BooleanField(default=False)
    run_after = models.DateTimeField(null=True, blank=True)
    # (No index of its own: nightjar_task_due, (status, published_at), serves a lookup by status
    # too, and each index is one more page the worker writes for every task it marks done.)
    status = models.CharField(max_length=20, choices=STATUSES, default=TaskResultStatus.READY)
    enqueued_at = models.DateTimeField(default=timezone.now)
    # When it was last handed to the broker (None: not yet, e.g. deferred or
    # waiting for a retry); reconcile publishes READY rows by this.
    published_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(null=True, blank=True)
    # [{"exception_class_path": ..., "traceback": ...}], one per failed attempt
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)
    attempts = models.PositiveIntegerField(default=0)
    # attempts when staff last requeued it: the retry limit counts from there.
    requeued_at_attempt = models.PositiveIntegerField(default=0)
    # False: the body ran outside the transaction that recorded it (at-least-once).
    atomic = models.BooleanField(default=True)
    # enqueue_once()'s key: unique, so the same work enqueued twice is one task (NULLs never clash).
    enqueue_key = models.CharField(max_length=200, null=True, blank=True, unique=True, editable=False)

    objects = TaskRecordQuerySet.as_manager()

    class Meta:
        ordering = ["-enqueued_at", "-id"]
        indexes = [models.Index(fields=["status", "published_at"], name="nightjar_task_due")]
        # The admin's actions, each a permission of its own (view: Django's view_taskrecord).
        permissions = [
            ("requeue_taskrecord", "Can requeue a parked task"),
            ("discard_taskrecord", "Can discard a parked task"),
            ("cancel_taskrecord", "Can cancel a task waiting to run"),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} {self.task_path} {self.status}"


class TaskCompletion(models.Model):
    """The completion key: inserted in the transaction that runs the task, so
    a repeat of a done task finds it and runs nothing."""

    task = models.OneToOneField(TaskRecord, primary_key=True, on_delete=models.CASCADE, related_name="completion")
    completed = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"task {self.task_id} done {self.completed:%Y-%m-%d %H:%M:%S}"


def _task_key(related_name: str, on_delete=models.SET_NULL):
    return models.ForeignKey(TaskRecord, null=True, blank=True, on_delete=on_delete, related_name=related_name)


class TaskRejectedMessage(AbstractRejectedMessage):
    task = _task_key("rejected_messages")


class TaskFailure(AbstractDeliveryFailure):
    task = _task_key("delivery_failures")


class TaskParked(AbstractParkedDelivery):
    task = _task_key("parked_deliveries", models.CASCADE)

    class Meta(AbstractParkedDelivery.Meta):
        verbose_name = "parked task"
        verbose_name_plural = "parked tasks"


class TaskRedelivery(AbstractRedelivery):
    task = _task_key("redeliveries")


class TaskWorkerReport(AbstractWorkerReport):
    """What a worker serving the tasks channel says about itself."""


class TaskStaffAction(models.Model):
    """Who requeued or discarded which task, and when: written in the same
    transaction as the change, whether staff used the admin or `parked`."""

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=40)
    task = _task_key("staff_actions")
    detail = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} task {self.task_id} at {self.at:%Y-%m-%d %H:%M:%S}"
