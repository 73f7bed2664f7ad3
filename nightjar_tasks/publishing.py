"""Handing a stored task to the broker. Every wait is bounded by the
engine's NIGHTJAR_BROKER_TIMEOUT; a task that could not be published stays
READY in its row and reconcile publishes it later."""

from django.utils import timezone

from nightjar_delivery import transport
from nightjar_tasks import conf, messages
from nightjar_tasks.models import TaskRecord


def publish(record: TaskRecord) -> None:
    """Publish one task's message. Raises transport.BrokerError."""
    transport.publish(
        messages.encode(record.pk, record.task_path),
        message_id=f"task-{record.pk}",
        queue=conf.broker_queue(record.queue_name),
    )


def mark_published(records: list[TaskRecord]) -> None:
    TaskRecord.objects.filter(pk__in=[record.pk for record in records]).update(published_at=timezone.now())
