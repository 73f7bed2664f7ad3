"""Handling what passed the screen: the channel's handler for one delivery
(it acks after its own commit), or the channel's batch handler (one
transaction, one ack) in batch mode; a rejection committed before its ack; and
what a Ctrl+C at a checkpoint did to the delivery under way."""

import time

from django.db import close_old_connections, connection, router, transaction
from django.utils import timezone

from nightjar_delivery import conf, metrics, recording, transport


class Handling:
    """A Worker's handling. Owns the delivery under way (current,
    current_acked, on), the counts handled and rejected, and the database
    connection checks (connections_suspect, last_connection_check)."""

    def process(self, deliveries: list[transport.Delivery], *, batch: bool = False) -> None:
        """Screen the deliveries, then hand what passed to the handler: one
        transaction and one ack for them all in batch mode (handle_batch), else
        the per-delivery handler for the one delivery. Raises on a database
        error, leaving what was not acked unacked."""
        self.check_connections()
        started = time.perf_counter()
        accepted, rejections, stored = self.screen(deliveries, batch=batch)
        # The database transport: the ack joins the handler's commit (transport.ack_within).
        with transport.ack_within(self.consumer, deliveries, using=router.db_for_write(self.channel.intent_model)):
            if batch:
                self.handle_batch(deliveries, accepted, rejections, stored, started)
                return
            for delivery, reason in rejections:
                self.reject(delivery, reason)
            for delivery, message, key in accepted:
                self.handle_one(delivery, message, key, stored[key][1], started)

    def handle_batch(self, deliveries, accepted, rejections, stored, started: float) -> None:
        """The checked messages and the rejections in one transaction (the
        channel's handle_batch), then one ack for the whole batch."""
        channel = self.channel
        messages = [message for _, message, _ in accepted]
        if accepted:
            self.say("\n".join(f"Received {channel.label(key)} redelivered={d.redelivered}" for d, _, key in accepted))
            keys = [key for _, _, key in accepted]
            self.on = f"batch of {len(deliveries)}, {channel.label(min(keys))}–{channel.label(max(keys))}"
        tags = [delivery.tag for delivery in deliveries]
        ack_all = lambda: self.consumer.ack_many(tags, flush=self.flush_acks)  # noqa: E731
        new = channel.handle_batch(messages, rejections, ack_all, self.pause, stored)
        for delivery, reason in rejections:
            self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}")
        self.handled += len(messages)
        self.rejected += len(rejections)
        self.measure(started, handled=len(messages), rejected=len(rejections), made=[stored[pk][1] for pk in new or ()])
        metrics.BATCH_SIZE.observe(len(deliveries))
        self.say("Handler returned.")

    def handle_one(self, delivery: transport.Delivery, message, key: int, created: float, started: float) -> None:
        """The per-delivery handler, which acks after its own commit."""
        code = self.channel.label(key)
        self.say(f"Received {code} redelivered={delivery.redelivered}")
        self.current, self.current_acked = delivery, False
        self.on = code
        since = timezone.now() if delivery.redelivered else None
        self.handler(message, lambda: self.ack_current(delivery), self.pause)
        self.handled += 1
        # The handler does not say whether it made the outcome. A first delivery almost always
        # does; a redelivery (after a crash: the slow cases the latency metric is for) may or
        # may not, so for those the channel says (made_since: one query, for redeliveries only).
        made = not delivery.redelivered or self.made_since(key, since)
        self.measure(started, handled=1, made=[created] if made else [])
        self.say("Handler returned.")

    def check_connections(self) -> None:
        """Drop a database connection that broke or outlived CONN_MAX_AGE, as
        Django does around a request: after a failure, else once a second
        (on PostgreSQL each check costs a round trip, too much per delivery)."""
        if self.connections_suspect and not connection.in_atomic_block:
            # After a failure, a new connection: one that still answers SELECT 1
            # may keep a state that fails every write (a session opened while the
            # database was read-only stays read-only until CONN_MAX_AGE).
            connection.close()
        if self.connections_suspect or time.monotonic() - self.last_connection_check >= 1.0:
            close_old_connections()
            self.connections_suspect = False
            self.last_connection_check = time.monotonic()

    def ack_current(self, delivery: transport.Delivery) -> None:
        self.consumer.ack(delivery.tag, flush=self.flush_acks)
        self.current_acked = True

    def interrupted(self) -> str:
        """What a Ctrl+C at a checkpoint did to the delivery, in one honest sentence."""
        if (self.current is not None and self.current_acked) or transport.acked_within(self.consumer, self.current):
            return f"Interrupted; the delivery was already acked, so {transport.name()} has forgotten it: nothing goes back."
        sentence = f"Interrupted; the delivery goes back to {transport.name()}."
        if self.current is None:
            return sentence
        # Parking is Nightjar's own count of failures; returns only meet the
        # broker's backstop limit, which each transport says in its own words.
        returns, limit = self.current.attempts + 1, conf.NIGHTJAR_DELIVERY_LIMIT
        return (
            f"{sentence} No failure is recorded, so it never counts towards parking ({limit} failed attempts)."
            f" It has gone back {returns} time(s); {transport.past_the_return_limit(limit)},"
            " and the next reconcile publishes it again."
        )

    def reject(self, delivery: transport.Delivery, reason: str) -> None:
        # Commit the record first; only then may RabbitMQ forget the delivery.
        with transaction.atomic():
            record = recording.record_rejection(delivery=delivery, reason=reason, channel=self.channel)
        self.consumer.ack(delivery.tag)
        self.rejected += 1
        metrics.REJECTED.inc()
        already = "" if record is not None else " (already recorded)"
        self.say(f"Rejected a delivery redelivered={delivery.redelivered}: {reason}{already}")
