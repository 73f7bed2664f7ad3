"""The engine's one table of its own: the database transport's messages
(NIGHTJAR_BROKER_URL db://<alias>, nightjar_delivery/transport/database.py).
Empty and unused on RabbitMQ and Redis. Times are seconds since the epoch on
the database's own clock, so workers on several machines agree on a lease."""

from django.db import models


class Message(models.Model):
    """One publication, a row until its ack deletes it. Ready while
    lease_until is NULL or past; claimed (held by one worker) until then.
    Dead letters are rows of the queue `<queue>.dead`."""

    queue = models.CharField(max_length=255)
    body = models.BinaryField()
    message_id = models.CharField(max_length=255, blank=True, default="")
    created = models.FloatField()
    # How many times a worker took it: past NIGHTJAR_DELIVERY_LIMIT + 1 it moves to `<queue>.dead`.
    deliveries = models.PositiveIntegerField(default=0)
    # Who holds it (host:pid:n, for people) and the holder's session: PostgreSQL's
    # backend pid, SQLite's worker pid; a holder that is gone gives its claims back.
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    holder = models.IntegerField(null=True)
    lease_until = models.FloatField(null=True)

    class Meta:
        db_table = "nightjar_delivery_message"
        # The claim's scan: a queue's rows in publication order.
        indexes = [models.Index(fields=["queue", "id"], name="nightjar_message_queue_id")]

    def __str__(self) -> str:
        return f"message #{self.pk} on {self.queue}"
