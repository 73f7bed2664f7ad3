"""The database transport's own mechanisms (nightjar_delivery/transport/database.py),
on the test database itself whatever NIGHTJAR_TEST_TRANSPORT says: leases
renewed while held and taken over once they run out, the delivery limit's
dead letters, a publish inside a transaction. The conformance and crash-window
tests prove the rest on it (bin/test's database leg)."""

import time

import pytest
from django.core import checks
from django.db import transaction

from nightjar_delivery import transport
from nightjar_delivery.checks import broker_settings

# transport_free: it names its own transport (db://default), whichever broker the run started.
pytestmark = [
    pytest.mark.broker,
    pytest.mark.postgres,
    pytest.mark.transport_free,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def on_the_database(settings):
    settings.NIGHTJAR_BROKER_URL = "db://default"
    return settings


def take(consumer, idle: float = 0.3):
    return next(consumer.consume(idle_seconds=idle))


def test_a_held_row_stays_with_its_live_holder_past_its_lease_and_goes_once_it_is_silent(on_the_database):
    on_the_database.NIGHTJAR_CLAIM_IDLE_SECONDS = 0.6  # renewed every 0.2 s
    transport.publish_raw([b"long body"])
    holder = transport.Consumer(queue=transport.queue_name())
    other = transport.Consumer(queue=transport.queue_name())
    try:
        first = take(holder)
        assert first.body == b"long body"
        time.sleep(1.5)  # two and a half leases: renewed, never free
        assert take(other) is None
        assert transport.queue_counts(transport.queue_name())["unacked"] == 1
        holder._stopped.set()  # frozen: its keeper thread renews no more
        again = take(other, idle=3)
        assert (again.body, again.redelivered, again.attempts) == (b"long body", True, 1)
        other.ack(again.tag)
    finally:
        holder.close()
        other.close()
    assert transport.queue_counts(transport.queue_name())["ready"] == 0


def test_past_the_delivery_limit_a_row_moves_to_the_dead_letter_queue(on_the_database):
    on_the_database.NIGHTJAR_DELIVERY_LIMIT = 1
    transport.publish_raw([b"poison"])
    consumer = transport.Consumer(queue=transport.queue_name())
    try:
        for _ in range(2):  # taken twice: the limit's + 1
            consumer.requeue(take(consumer).tag)
        assert take(consumer) is None  # the third take moved it
        counts = transport.queue_counts(transport.queue_name())
        assert (counts["ready"], counts["unacked"], counts["dead"]) == (0, 0, 1)
        dead = consumer.get(dead=True)
        assert (dead.body, dead.attempts) == (b"poison", 2)
        consumer.ack(dead.tag)
    finally:
        consumer.close()
    assert transport.queue_counts(transport.queue_name())["dead"] == 0


def test_a_publish_inside_a_transaction_is_rolled_back_with_it(on_the_database):
    with pytest.raises(RuntimeError), transaction.atomic():
        transport.publish(b"never", message_id="m1", queue=transport.queue_name())
        raise RuntimeError("the caller's transaction fails")
    with transaction.atomic():
        transport.publish(b"kept", message_id="m2", queue=transport.queue_name())
    consumer = transport.Consumer(queue=transport.queue_name())
    try:
        delivery = take(consumer)
        assert (delivery.body, delivery.message_id, delivery.redelivered) == (b"kept", "m2", False)
        consumer.ack(delivery.tag)
        assert take(consumer) is None
    finally:
        consumer.close()


def test_a_url_naming_a_database_that_is_not_configured_is_an_error(settings):
    settings.NIGHTJAR_BROKER_URL = "db://elsewhere"
    assert [error.id for error in broker_settings(None)] == ["nightjar.E007"]
    settings.NIGHTJAR_BROKER_URL = "db://default"
    assert [e for e in broker_settings(None) if e.level >= checks.ERROR] == []
    with pytest.raises(transport.BrokerError, match="DATABASES does not have"):
        settings.NIGHTJAR_BROKER_URL = "db://elsewhere"
        transport.Consumer(queue="q")


def test_rows_held_by_a_worker_that_is_gone_come_back_at_once_not_at_the_lease(on_the_database):
    """A row claimed for an hour by a holder that no longer exists (PostgreSQL: no such
    backend; SQLite: no such process on this host, whatever its consumer name was)."""
    import socket

    from nightjar_delivery.models import Message

    on_the_database.NIGHTJAR_CONSUMER_NAME = "another-service"  # not the dead worker's
    transport.publish_raw([b"held by the dead"])
    gone = 2**22 + 12345  # above any pid this machine hands out (pid_max is at most 2**22)
    Message.objects.update(
        claimed_by=f"{socket.gethostname()}:{gone}:1", holder=gone, deliveries=1, lease_until=time.time() + 3600
    )
    consumer = transport.Consumer(queue=transport.queue_name())
    try:
        delivery = take(consumer)
        assert (delivery.body, delivery.redelivered, delivery.attempts) == (b"held by the dead", True, 1)
        consumer.ack(delivery.tag)
    finally:
        consumer.close()
