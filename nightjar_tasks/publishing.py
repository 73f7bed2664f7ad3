"""Handing a stored task to the broker. Every wait is bounded by the
engine's NIGHTJAR_BROKER_TIMEOUT; a task that could not be published stays
READY in its row and reconcile publishes it later."""

from django.utils import timezone

from nightjar_delivery import channel, transport
from nightjar_delivery.reconcile import publish_after_commit as engine_publish_after_commit
from nightjar_tasks import conf, messages
from nightjar_tasks.models import TaskRecord


def publish(record: TaskRecord) -> None:
    """Publish one task's message. Raises transport.BrokerError."""
    transport.publish(
        messages.encode(record.pk, record.task_path),
        message_id=f"task-{record.pk}",
        queue=conf.broker_queue(record.queue_name),
    )


def publish_after_commit(record: TaskRecord) -> None:
    """The task is safe in its row, so a failed publish is logged and left
    for reconcile (the engine's publish_after_commit); enqueue() returns all the same."""
    engine_publish_after_commit(channel.get(conf.channel_name(record.queue_name)), record)


def mark_published(records: list[TaskRecord]) -> None:
    TaskRecord.objects.filter(pk__in=[record.pk for record in records]).update(published_at=timezone.now())
