"""Handing a stored task to the broker. Every wait is bounded by the
engine's NIGHTJAR_BROKER_TIMEOUT; a task that could not be published stays
READY in its row and reconcile publishes it later."""

from django.utils import timezone

from nightjar_delivery import transport
from nightjar_tasks import conf, messages
from nightjar_tasks.models import TaskRecord


def publish(record: TaskRecord, *, on_failure=None) -> None:
    """Publish one task's message. Raises transport.BrokerError; with
    on_failure, publishes without waiting for the broker's answer where the
    transport can, and tells on_failure(error) instead (enqueue's path)."""
    body, message_id = messages.encode(record.pk, record.task_path), f"task-{record.pk}"
    queue = conf.broker_queue(record.queue_name)
    if on_failure is None:
        transport.publish(body, message_id=message_id, queue=queue)
    else:
        transport.publish_soon(body, message_id=message_id, queue=queue, on_failure=on_failure)


def mark_published(records: list[TaskRecord]) -> None:
    TaskRecord.objects.filter(pk__in=[record.pk for record in records]).update(published_at=timezone.now())
