"""Each transport's Consumer keeps the written protocol
(nightjar_delivery/transport/protocol.py), against the real broker: RabbitMQ here,
Redis Streams when bin/test runs the suite with NIGHTJAR_TEST_TRANSPORT=redis
(the broker tier), the database transport with NIGHTJAR_TEST_TRANSPORT=database
(SQLite, and PostgreSQL with DATABASE_URL), and the in-memory transport the fast tier stands on (each
test once more, marked fast: tests/conftest.py gives it memory://)."""

import pytest

from nightjar_delivery import transport
from nightjar_delivery.transport.protocol import Consumer as ConsumerProtocol

# The database transport's consumer has a connection of its own: it sees only what is committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(
    autouse=True,
    params=[pytest.param("broker", marks=pytest.mark.broker), pytest.param("memory", marks=pytest.mark.fast)],
)
def on(request):
    """Which transport: the tier's (the conftest's test_settings sets the broker URL from the marker)."""
    expected = "memory" if request.param == "memory" else ("redis_streams", "amqp", "database")
    assert transport.kind() in expected
    return request.param


def take(consumer, count: int) -> list:
    """The next count deliveries; consume() waits for them where get() may
    not yet see them."""
    taken = []
    for delivery in consumer.consume(idle_seconds=0.2):
        if delivery is None:
            break
        taken.append(delivery)
        if len(taken) == count:
            break
    return taken


def test_the_consumer_has_every_member_of_the_protocol():
    consumer = transport.Consumer(queue=transport.queue_name())
    try:
        assert isinstance(consumer, ConsumerProtocol)
        assert consumer.lost == []
        assert consumer.get() is None  # nothing published yet
    finally:
        consumer.close()


def test_a_delivery_comes_with_its_body_and_goes_once_acked():
    transport.publish_raw([b"first", b"second", b"third"])
    consumer = transport.Consumer(prefetch=10, queue=transport.queue_name())
    try:
        first, second, third = take(consumer, 3)
        assert [d.body for d in (first, second, third)] == [b"first", b"second", b"third"]
        assert not any(d.redelivered for d in (first, second, third))
        consumer.ack(first.tag)
        consumer.ack_many([second.tag, third.tag])
    finally:
        consumer.close()
    again = transport.Consumer(queue=transport.queue_name())
    try:
        assert again.get() is None  # acked: the broker forgot all three
    finally:
        again.close()


def test_a_requeued_delivery_comes_again_redelivered():
    transport.publish_raw([b"handed back"])
    consumer = transport.Consumer(queue=transport.queue_name())
    try:
        (delivery,) = take(consumer, 1)
        consumer.requeue(delivery.tag)
        (again,) = take(consumer, 1)
        assert (again.body, again.redelivered) == (b"handed back", True)
        consumer.ack(again.tag)
    finally:
        consumer.close()


def test_what_is_not_acked_goes_back_when_the_consumer_closes():
    transport.publish_raw([b"left unacked"])
    consumer = transport.Consumer(queue=transport.queue_name())
    (delivery,) = take(consumer, 1)
    consumer.close()
    other = transport.Consumer(queue=transport.queue_name())
    try:
        (again,) = take(other, 1)
        assert (again.body, again.redelivered) == (b"left unacked", True)
        other.ack(again.tag)
    finally:
        other.close()
