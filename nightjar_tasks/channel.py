"""The tasks channels: what the delivery engine asks of nightjar_tasks
(nightjar_delivery/channel.py says what each method promises). One channel per Django
task queue ("tasks" for "default", "tasks.<q>" for another), each on its own
broker queue (conf.broker_queue); registered in NightjarTasksConfig.ready()."""

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_delivery import BrokerError, Channel, ContractError, Delivery, DomainError, HandlerError, Pause, register
from nightjar_tasks import attempts, conf, messages, publishing, runner
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import (
    TaskCompletion,
    TaskFailure,
    TaskParked,
    TaskRecord,
    TaskRedelivery,
    TaskRejectedMessage,
    TaskStaffAction,
    TaskWorkerReport,
)


def label(task_id: int) -> str:
    return f"task {task_id}"


def task_key(code: str) -> int:
    """The id staff type (`nightjar_parked requeue 12`, or "task 12")."""
    try:
        return int(str(code).strip().removeprefix("task").strip())
    except ValueError:
        raise DomainError(f"{code!r} is not a task id.") from None


class TasksChannel(Channel):
    decode = staticmethod(messages.decode)
    hinted_ids = staticmethod(messages.hinted_ids)
    claimed_id = staticmethod(messages.claimed_id)
    label = staticmethod(label)
    key = staticmethod(task_key)
    handler_help = "nightjar_tasks.runner.handle"
    intent_model = TaskRecord
    intent_field = "task"
    intent_time_field = "enqueued_at"
    rejected_model = TaskRejectedMessage
    failure_model = TaskFailure
    redelivery_model = TaskRedelivery
    parked_model = TaskParked
    worker_report_model = TaskWorkerReport
    staff_action_model = TaskStaffAction
    intents = "tasks"
    serve_reconcile_every = 5.0  # a retry waits READY until reconcile publishes it: never without one
    outcome = "result"

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
    def stored(ids: Iterable[int]) -> dict[int, tuple[Any, float]]:
        """{id: (runner.Screened: its path and its whole row, when enqueued)}: a
        batch builds its records from these rows (runner.handle_batch)."""
        return runner.screened(ids)

    @staticmethod
    def check_stored(message: Any, stored: Any) -> None:
        messages.check_stored(message, stored.path if stored is not None else None)
        if stored.run_after is not None and stored.run_after > timezone.now():
            # Deferred, or waiting out its retry's backoff: reconcile publishes it when due.
            raise ContractError(
                f"Task {message.task_id} is not due until {stored.run_after:%Y-%m-%d %H:%M:%S %Z}: "
                "a message came before its time, and it runs when due."
            )

    @staticmethod
    def made_since(intent_id: int, since: datetime | None) -> bool:
        return TaskCompletion.objects.filter(task_id=intent_id, completed__gte=since).exists()

    def default_handler(self) -> str:
        return self.handler_help

    def load_handler(self, spec: str) -> Callable[..., Any]:
        try:
            return import_string(spec)
        except ImportError as error:
            raise HandlerError(f"Cannot load the task handler {spec!r}: {error}") from None

    def handle_batch(
        self,
        messages_: list[Any],
        rejections: list[tuple[Delivery, str]],
        ack_all: Callable[[], None],
        pause: Pause | None,
        stored: dict[int, Any],
    ) -> Iterable[int] | None:
        return runner.handle_batch(messages_, rejections, ack_all, pause, stored, channel=self)

    # -- reconcile and parking --

    def mine(self) -> "QuerySet[TaskRecord]":
        return TaskRecord.objects.filter(queue_name=self.queue_name)

    # -- the domain's answers to the engine's reconcile and parking (nightjar_delivery/reconcile.py, issue-24-engine) --

    def due(self, *, stored_before: datetime) -> "QuerySet[TaskRecord]":
        """READY tasks to publish: due (run_after passed) and never published
        (deferred, or waiting for a retry) or published before stored_before
        (the grace period: a lost publish); none that is parked."""
        now = timezone.now()
        return (
            self.mine()
            .filter(status=TaskResultStatus.READY)
            .filter(Q(run_after__isnull=True) | Q(run_after__lte=now))
            .filter(Q(published_at__isnull=True) | Q(published_at__lte=stored_before))
            .exclude(pk__in=TaskParked.objects.holding().filter(task__isnull=False).values("task"))
            .order_by("enqueued_at", "pk")
        )

    def publish(self, intent: Any) -> None:
        publishing.publish(intent)

    def publish_soon(self, intent: Any, *, on_failure: Callable[[BrokerError], object]) -> None:
        publishing.publish(intent, on_failure=on_failure)

    def republished(self, intents: list[Any], *, actor: str, older_than: float) -> None:
        publishing.mark_published(intents)

    def settled(self, intent_id: int) -> bool:
        return not TaskRecord.objects.filter(pk=intent_id, status=TaskResultStatus.READY).exists()

    def refuse_republish(self, intent: Any, what: str) -> None:
        if TaskCompletion.objects.filter(task_id=intent.pk).exists():
            raise self.refusal(f"{label(intent.pk)} is done already: it is not {what}.")

    def on_park(self, intent: Any, *, reason: str, deaths: int) -> None:
        """Parked by the engine (its worker died on it until the delivery
        limit, or a dead letter): FAILED, saying so (attempts.fail_parked)."""
        attempts.fail_parked(intent, reason=reason, deaths=deaths)

    def on_requeue(self, intent: Any) -> None:
        """Staff requeued the parked task: back to the workers, READY, with a
        fresh retry budget (its attempts so far no longer count)."""
        TaskRecord.objects.filter(pk=intent.pk).update(
            status=TaskResultStatus.READY,
            finished_at=None,
            run_after=None,
            requeued_at_attempt=F("attempts"),
            published_at=timezone.now(),
        )

    # The engine's gauges, counted over this queue's tasks: every READY one (due or not) is pending.

    def pending_now(self) -> "QuerySet[TaskRecord]":
        return self.mine().filter(status=TaskResultStatus.READY)

    def parked_waiting(self) -> "QuerySet[Any]":
        return super().parked_waiting().filter(task__queue_name=self.queue_name)


def register_channels() -> None:
    """One channel per Django task queue our backends accept."""
    for queue_name in conf.queue_names():
        register(TasksChannel(queue_name))
