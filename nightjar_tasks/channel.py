"""The tasks channels: what the delivery engine asks of nightjar_tasks
(delivery/channel.py says what each method promises). One channel per Django
task queue ("tasks" for "default", "tasks.<q>" for another), each on its own
broker queue (conf.broker_queue); registered in NightjarTasksConfig.ready()."""

import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from delivery import channel, transport
from delivery.codec import ContractError
from delivery.recording import park, record_rejection
from nightjar_tasks import conf, messages, publishing, runner
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import (
    TaskCompletion,
    TaskFailure,
    TaskParked,
    TaskRecord,
    TaskRedelivery,
    TaskRejectedMessage,
    TaskWorkerReport,
)

RECONCILE_ACTOR = "nightjar (reconcile)"


@dataclass
class CollectReport:
    parked: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    dropped: int = 0
    rejected: int = 0


@dataclass
class ReconcileReport:
    published: list[str] = field(default_factory=list)
    remaining: int = 0
    passes: int = 0
    collected: CollectReport | None = None


def label(task_id: int) -> str:
    return f"task {task_id}"


def task_key(code: str) -> int:
    """The id staff type (`parked --requeue 12`, or "task 12")."""
    try:
        return int(str(code).strip().removeprefix("task").strip())
    except ValueError:
        raise channel.DomainError(f"{code!r} is not a task id.") from None


class TasksChannel(channel.Channel):
    decode = staticmethod(messages.decode)
    hinted_ids = staticmethod(messages.hinted_ids)
    check_stored = staticmethod(messages.check_stored)
    claimed_id = staticmethod(messages.claimed_id)
    label = staticmethod(label)
    handler_help = "nightjar_tasks.runner.handle"
    intent_model = TaskRecord
    intent_field = "task"
    rejected_model = TaskRejectedMessage
    failure_model = TaskFailure
    redelivery_model = TaskRedelivery
    parked_model = TaskParked
    worker_report_model = TaskWorkerReport

    def __init__(self, queue_name: str = "default") -> None:
        self.queue_name = queue_name
        self.name = conf.channel_name(queue_name)

    @property
    def queue(self) -> str:
        return conf.broker_queue(self.queue_name)

    @staticmethod
    def intent_id(message: messages.TaskMessage) -> int:
        return message.task_id

    @staticmethod
    def stored(ids):
        rows = TaskRecord.objects.filter(pk__in=ids).values_list("pk", "task_path", "enqueued_at")
        return {pk: (path, enqueued.timestamp()) for pk, path, enqueued in rows}

    @staticmethod
    def made_since(intent_id, since) -> bool:
        return TaskCompletion.objects.filter(task_id=intent_id, completed__gte=since).exists()

    def default_handler(self) -> str:
        return self.handler_help

    def load_handler(self, spec):
        try:
            return import_string(spec)
        except ImportError as error:
            raise channel.HandlerError(f"Cannot load the task handler {spec!r}: {error}") from None

    def handle_batch(self, messages_, rejections, ack_all, pause):
        return runner.handle_batch(messages_, rejections, ack_all, pause)

    # -- reconcile and parking --

    def mine(self):
        return TaskRecord.objects.filter(queue_name=self.queue_name)

    def reconcile(self, *, limit: int = 100, older_than: float = 60, actor: str = RECONCILE_ACTOR, **_):
        """Collect dead letters, then publish what is due: READY tasks never
        published (deferred, or waiting for a retry) whose run_after has come,
        and those published longer than the grace period ago (a publish that
        failed, or a message the broker lost; the worker runs a repeat once)."""
        report = ReconcileReport(collected=self.collect_dead_letters())
        started = time.monotonic()
        while True:
            now = timezone.now()
            due = (
                self.mine()
                .filter(status=TaskResultStatus.READY)
                .filter(Q(run_after__isnull=True) | Q(run_after__lte=now))
                .filter(Q(published_at__isnull=True) | Q(published_at__lte=now - timedelta(seconds=older_than)))
                .exclude(pk__in=TaskParked.objects.holding().filter(task__isnull=False).values("task"))
                .order_by("enqueued_at", "pk")
            )
            records = list(due[:limit])
            published = []
            try:
                for record in records:
                    publishing.publish(record)
                    published.append(record)
                    report.published.append(label(record.pk))
            finally:
                publishing.mark_published(published)
            report.passes += 1
            if len(records) < limit or time.monotonic() - started > 300:
                break
        report.remaining = due.count()
        return report

    def collect_dead_letters(self, *, limit: int = 1000):
        """What the broker dead-lettered: a body that names no task is a
        rejected record; a done task needs nothing; anything else is parked
        (FAILED) for staff."""
        report = CollectReport()
        consumer = transport.Consumer(queue=self.queue)
        try:
            for _ in range(limit):
                delivery = consumer.get(dead=True)
                if delivery is None:
                    break
                self._collect_one(delivery, report)
                consumer.ack(delivery.tag)
        finally:
            consumer.close()
        return report

    def _collect_one(self, delivery, report: CollectReport) -> None:
        try:
            message = messages.decode(delivery.body)
            record = TaskRecord.objects.filter(pk=message.task_id).first()
            messages.check_stored(message, record.task_path if record else None)
        except ContractError as error:
            with transaction.atomic():
                record_rejection(delivery=delivery, reason=str(error))
            report.rejected += 1
            return
        if record.status != TaskResultStatus.READY or TaskParked.objects.holding().filter(task=record).exists():
            report.dropped += 1
            return
        failure = record.delivery_failures.first()
        reason = f"{failure.error} (worker {failure.worker})" if failure else "dead-lettered by the broker"
        with transaction.atomic():
            TaskRecord.objects.filter(pk=record.pk).update(status=TaskResultStatus.FAILED, finished_at=timezone.now())
            park(record, delivery, reason)
        report.parked.append(label(record.pk))

    def requeue_parked(self, *, code: str, actor: str) -> str:
        """Staff: run a parked task again, with a fresh retry budget."""
        key = task_key(code)
        with transaction.atomic():
            record = TaskRecord.objects.select_for_update().filter(pk=key).first()
            held = TaskParked.objects.holding().filter(task_id=key)
            if record is None or not held.exists():
                raise channel.DomainError(f"{label(key)} is not parked.")
            if TaskCompletion.objects.filter(task_id=key).exists():
                raise channel.DomainError(f"{label(key)} is done already.")
            held.update(resolution=TaskParked.REQUEUED, resolved_by=actor[:150], resolved_at=timezone.now())
            record.status, record.finished_at, record.run_after = TaskResultStatus.READY, None, None
            record.requeued_at_attempt, record.published_at = record.attempts, timezone.now()
            record.save()
            transaction.on_commit(lambda: publishing.publish_after_commit(record))
        return label(key)

    def discard_parked(self, *, code: str, actor: str) -> str:
        key = task_key(code)
        with transaction.atomic():
            waiting = TaskParked.objects.select_for_update().filter(task_id=key, resolution="")
            if not waiting.exists():
                raise channel.DomainError(f"{label(key)} has no parked delivery waiting for staff.")
            waiting.update(resolution=TaskParked.DISCARDED, resolved_by=actor[:150], resolved_at=timezone.now())
        return label(key)

    def parked_lines(self) -> list[str]:
        lines = []
        for parked in TaskParked.objects.filter(resolution="", task__queue_name=self.queue_name).select_related("task"):
            path = parked.task.task_path if parked.task else "(no task)"
            lines.append(
                f"{label(parked.task_id)}  {path}  parked {parked.parked:%Y-%m-%d %H:%M:%S}"
                f"  after {parked.attempts} attempts  {parked.reason}"
            )
        return lines

    def actor(self, command: str) -> str:
        import getpass

        try:
            return f"{getpass.getuser()} (manage.py {command})"[:150]
        except Exception:
            return f"manage.py {command}"

    def gauges(self) -> dict:
        try:
            counts = transport.queue_counts(self.queue)
        except transport.BrokerError:
            counts = {}
        return {
            "pending": self.mine().filter(status=TaskResultStatus.READY).count(),
            "parked": TaskParked.objects.filter(resolution="", task__queue_name=self.queue_name).count(),
            "queue": counts,
        }


def register_channels() -> None:
    """One channel per Django task queue our backends accept."""
    for queue_name in conf.queue_names():
        channel.register(TasksChannel(queue_name))
