"""Handing a stored task to the broker. Every wait is bounded by the
engine's NIGHTJAR_BROKER_TIMEOUT; a task that could not be published stays
READY in its row and reconcile publishes it later."""

import logging

from django.utils import timezone

from nightjar_delivery import metrics, transport
from nightjar_tasks import conf, messages
from nightjar_tasks.models import TaskRecord

logger = logging.getLogger(__name__)


def publish(record: TaskRecord) -> None:
    """Publish one task's message. Raises transport.BrokerError."""
    transport.publish(
        messages.encode(record.pk, record.task_path),
        message_id=f"task-{record.pk}",
        queue=conf.broker_queue(record.queue_name),
    )


def publish_after_commit(record: TaskRecord) -> None:
    """The task is safe in its row, so a failed publish is logged and left
    for reconcile; enqueue() returns all the same."""
    try:
        publish(record)
    except transport.BrokerError as error:
        metrics.PUBLISHES_FAILED.inc()
        logger.warning("Task %s stored but not published; reconcile will publish it: %s", record.pk, error)


def mark_published(records: list[TaskRecord]) -> None:
    TaskRecord.objects.filter(pk__in=[record.pk for record in records]).update(published_at=timezone.now())
