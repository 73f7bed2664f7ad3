"""What the engine records, as abstract models (Django's way for a reusable
app, like AbstractUser): the user's app subclasses each one, adds the
foreign key to its own intent, and keeps its own table names, so no data
moves. Each user's models.py does this for its intents.

Each names its manager `objects` (what Django would add anyway): the engine
reaches a channel's records as `channel.failure_model.objects`, and a type
checker sees a manager on an abstract model only where it is declared."""

from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone


class AbstractRejectedMessage(models.Model):
    """A delivery that broke the contract or did not match its stored intent.
    Recorded (and only then acked) so that nothing is silently dropped."""

    MAX_REASON = 300
    MAX_EXCERPT = 8192

    reason = models.CharField(max_length=MAX_REASON)
    body_excerpt = models.TextField(blank=True)
    # Identifies a redelivery of the same poison body, so it is recorded once.
    body_sha256 = models.CharField(max_length=64, db_index=True)
    body_size = models.PositiveIntegerField()
    message_id = models.CharField(max_length=200, blank=True)
    redelivered = models.BooleanField(default=False)
    received = models.DateTimeField(default=timezone.now)

    objects = models.Manager()

    class Meta:
        abstract = True
        ordering = ["-received", "-id"]

    def __str__(self) -> str:
        return f"rejected #{self.pk}: {self.reason[:60]}"


class AbstractDeliveryFailure(models.Model):
    """One attempt the worker could not finish (the error was logged and the
    delivery handed back). Parking names the last one as its reason."""

    worker = models.CharField(max_length=100)
    error = models.CharField(max_length=300)
    at = models.DateTimeField(default=timezone.now)

    objects = models.Manager()

    class Meta:
        abstract = True
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"failure {self.at:%Y-%m-%d %H:%M:%S} {self.error[:60]}"


class ParkedManager(models.Manager):
    def holding(self) -> "models.QuerySet[Any]":
        """What keeps an intent parked: waiting for staff, or discarded by them."""
        return self.exclude(resolution=AbstractParkedDelivery.REQUEUED)


class AbstractParkedDelivery(models.Model):
    """A delivery that used up its delivery limit, moved from the dead-letter
    queue into the database for a person: requeue or discard. Reconcile
    leaves a parked intent alone."""

    REQUEUED = "requeued"
    DISCARDED = "discarded"
    RESOLUTIONS = [("", "waiting for staff"), (REQUEUED, "requeued"), (DISCARDED, "discarded")]

    reason = models.CharField(max_length=300)
    attempts = models.PositiveIntegerField(default=0)
    body_excerpt = models.TextField(blank=True)
    body_sha256 = models.CharField(max_length=64)
    parked = models.DateTimeField(default=timezone.now)
    resolution = models.CharField(max_length=20, choices=RESOLUTIONS, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Not parked for staff: the dead-letter collector published it again after
    # interruptions alone (reconcile.REPUBLISHES_AFTER_INTERRUPTIONS counts these).
    automatic_requeue = models.BooleanField(default=False)

    objects = ParkedManager()

    class Meta:
        abstract = True
        ordering = ["-parked", "-id"]
        verbose_name_plural = "parked deliveries"


class AbstractRedelivery(models.Model):
    """A delivery the broker had sent before (a worker died, failed or was
    stopped with it unacknowledged). Written by the worker for redeliveries
    only, a batch's in one statement: a normal delivery writes nothing here."""

    worker = models.CharField(max_length=100)
    # The broker's count: 2 is the second delivery of the same message.
    delivery = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)

    objects = models.Manager()

    class Meta:
        abstract = True
        ordering = ["-at", "-id"]
        verbose_name_plural = "redeliveries"

    def __str__(self) -> str:
        return f"redelivery {self.delivery} to {self.worker}"


class AbstractWorkerReport(models.Model):
    """What a running worker says about itself, rewritten every few seconds
    (NIGHTJAR_WORKER_REPORT_SECONDS), never once per delivery. A worker that
    stops saying anything is shown as gone; its row stays for staff."""

    name = models.CharField(max_length=100, unique=True)  # host:pid
    host = models.CharField(max_length=100)
    pid = models.PositiveIntegerField()
    transport = models.CharField(max_length=20)
    mode = models.CharField(max_length=100)
    started = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    stopped = models.DateTimeField(null=True, blank=True)  # a clean exit
    handled = models.PositiveBigIntegerField(default=0)
    rejected = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    handed_back = models.PositiveBigIntegerField(default=0)
    current = models.CharField(max_length=100, blank=True)  # the intent or batch it is on

    objects = models.Manager()

    class Meta:
        abstract = True
        ordering = ["-last_seen", "-id"]

    def __str__(self) -> str:
        return f"worker {self.name}"

    def state(self, now: datetime | None = None, gone_after: float = 30) -> str:
        if self.stopped is not None:
            return "stopped"
        now = now or timezone.now()
        return "gone" if (now - self.last_seen).total_seconds() > gone_after else "running"
