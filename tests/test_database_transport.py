"""The database transport's own mechanisms (nightjar_delivery/transport/database.py),
on the test database itself whatever NIGHTJAR_TEST_TRANSPORT says: leases
renewed while held and taken over once they run out, the delivery limit's
dead letters, a publish inside a transaction. The conformance and crash-window
tests prove the rest on it (bin/test's database leg)."""

import time
from unittest import mock

import pytest
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from nightjar_delivery import transport
from nightjar_delivery.checks import broker_settings
from nightjar_delivery.transport import database
from nightjar_tasks.models import TaskRecord
from tests import task_functions as tasks
from tickets import contract
from tickets.models import Registration
from tickets.services.registrations import register_guest

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


def ready_rows(queue: str) -> int:
    return transport.queue_counts(queue)["ready"]


def test_a_registration_and_its_message_commit_together_or_not_at_all(on_the_database):
    """On the database transport the registration's message is written in the
    registration's own transaction (publish_on_commit), not after its commit:
    there is no moment when one is committed without the other."""
    queue = transport.queue_name()
    with pytest.raises(RuntimeError), transaction.atomic():
        register_guest(name="Ada Lovelace")
        assert ready_rows(queue) == 1  # already there, inside the transaction
        raise RuntimeError("the caller's transaction fails after the registration")
    assert (Registration.objects.count(), ready_rows(queue)) == (0, 0)
    registration = register_guest(name="Grace Hopper")
    assert ready_rows(queue) == 1
    consumer = transport.Consumer(queue=queue)
    try:
        delivery = take(consumer)
        assert contract.decode(delivery.body).registration_id == registration.pk
        consumer.ack(delivery.tag)
    finally:
        consumer.close()


def test_a_task_s_row_and_its_message_commit_together_inside_a_transaction_and_alone(on_the_database):
    """A task enqueued inside the caller's transaction: its message is a row of
    that transaction and rolls back with it. Enqueued outside one: the task's
    row and its message are one transaction of their own (publish_transaction)."""
    on_the_database.NIGHTJAR_TASKS_QUEUE = queue = f"{on_the_database.NIGHTJAR_QUEUE}.tasks"
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 2)
        assert ready_rows(queue) == 1
        raise RuntimeError("the caller's transaction fails after the enqueue")
    assert (TaskRecord.objects.count(), ready_rows(queue)) == (0, 0)
    db, commits = connections[DEFAULT_DB_ALIAS], []
    real_commit = db.commit
    # (Outside a transaction Django commits each statement by itself, never calling commit().)
    with mock.patch.object(db, "commit", side_effect=lambda: commits.append(1) or real_commit()):
        result = tasks.add.enqueue(2, 3)
    assert (commits, ready_rows(queue)) == ([1], 1)
    assert TaskRecord.objects.get(pk=int(result.id)).published_at is not None


def test_a_publish_that_fails_inside_the_transaction_leaves_the_row_for_reconcile(on_the_database, caplog):
    """The message's INSERT fails (its savepoint rolls back): the registration
    is kept (the guest sees no error) and left for reconcile, as a broker's
    failed publish after the commit is."""
    with mock.patch.object(database, "TABLE", "no_such_table"):
        registration = register_guest(name="Ada Lovelace")
    assert Registration.objects.filter(pk=registration.pk).exists()
    assert ready_rows(transport.queue_name()) == 0
    assert "stored but not published; reconcile will publish it" in caplog.text


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
