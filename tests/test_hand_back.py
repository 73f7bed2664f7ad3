"""How a delivery goes back to RabbitMQ, observed with a recording channel
(a fast unit test of the worker over the AMQP consumer). From RabbitMQ 4.3 a
quorum queue counts only basic.reject towards x-delivery-limit: a failure
must be a reject, one tag at a time; a deliberate hand-back (Ctrl+C,
SIGTERM, the prefetch at shutdown) a nack, which 4.3 does not count."""

import io
import threading
from types import SimpleNamespace

import pytest

from nightjar_delivery.transport import amqp
from nightjar_delivery.worker import Worker
from tickets import contract
from tickets.models import Registration

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]


class RecordingChannel:
    """Hands out the given bodies with basic_get and records every ack, nack and reject."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = list(bodies)
        self.sent: list[tuple] = []

    def basic_get(self, queue, auto_ack=False):
        if not self.bodies:
            return None, None, None
        tag = len(self.sent) + 100 + len(self.bodies)
        method = SimpleNamespace(delivery_tag=tag, redelivered=False)
        return method, SimpleNamespace(headers={}, message_id="m"), self.bodies.pop(0)

    def basic_ack(self, delivery_tag, multiple=False):
        self.sent.append(("ack", delivery_tag, multiple))

    def basic_nack(self, delivery_tag, multiple=False, requeue=True):
        self.sent.append(("nack", delivery_tag, multiple, requeue))

    def basic_reject(self, delivery_tag, requeue=True):
        self.sent.append(("reject", delivery_tag, requeue))

    def basic_cancel(self, consumer_tag):
        self.sent.append(("cancel", consumer_tag))


def recording_worker(handler, registration: Registration, batch: int | None = None) -> tuple[Worker, RecordingChannel]:
    channel = RecordingChannel([contract.encode(registration_id=registration.pk, name=registration.name)])
    consumer = amqp.Consumer.__new__(amqp.Consumer)
    consumer._channel, consumer._prefetch, consumer.lost, consumer.queue = channel, 1, [], amqp.queue_name()
    consumer._deferred_tag = consumer._deferred_count = 0
    consumer._connection = SimpleNamespace(is_open=True, close=lambda: None)
    consumer._lock, consumer._stopped = threading.RLock(), threading.Event()  # (no heartbeat thread here)
    worker = Worker(handler=handler, stdout=io.StringIO(), batch=batch)
    worker.receiver.consumer = consumer
    return worker, channel


def test_a_failed_delivery_is_rejected_and_what_is_left_at_close_is_nacked(settings):
    settings.NIGHTJAR_DELIVERY_LIMIT = 5

    def failing(message, ack, pause=None):
        raise RuntimeError("the handler broke")

    worker, channel = recording_worker(failing, Registration.objects.create(name="Failing Guest"))
    with pytest.raises(RuntimeError):
        worker.take_one()
    worker.close()
    tag = channel.sent[0][1]
    assert channel.sent == [("reject", tag, True), ("nack", 0, True, True)]


def test_a_ctrl_c_hands_the_delivery_back_with_a_nack_not_a_reject():
    def interrupted(message, ack, pause=None):
        raise KeyboardInterrupt  # what Ctrl+C at a checkpoint raises

    worker, channel = recording_worker(interrupted, Registration.objects.create(name="Interrupted Guest"))
    with pytest.raises(KeyboardInterrupt):
        worker.take_one()
    worker.close()
    assert channel.sent == [("nack", 0, True, True)]


def test_a_worker_stopping_hands_its_prefetch_back_with_one_nack_not_rejects():
    worker, channel = recording_worker(lambda *args: None, Registration.objects.create(name="Prefetched"))
    # What pika's BlockingChannel.consume() leaves: a consumer with deliveries buffered.
    channel._queue_consumer_generator = SimpleNamespace(consumer_tag="ctag-1", pending_events=[])
    worker.receiver.consumer.stop_consuming()
    worker.close()
    assert channel.sent == [("cancel", "ctag-1"), ("nack", 0, True, True), ("nack", 0, True, True)]


def test_a_failed_batch_retried_one_by_one_never_acks_past_its_failed_delivery(monkeypatch):
    """Service mode defers acks into one multiple=True ack; after a batch fails,
    the neighbours that succeed one by one must not ack the failed one with them."""
    registration = Registration.objects.create(name="Batch Neighbour")
    worker, channel = recording_worker(lambda *args: None, registration, batch=3)  # the three come as one batch
    worker.receiver.consumer._prefetch = 10
    worker.settler.defer_acks(True)  # service mode without checkpoints
    monkeypatch.setattr("nightjar_delivery.worker.loop.RETRY_PAUSE", 0)
    body = contract.encode(registration_id=registration.pk, name=registration.name)
    batch = [amqp.Delivery(body=body, tag=tag, redelivered=False, message_id="m", attempts=0) for tag in (1, 2, 3)]

    def process(deliveries, *, batch=False):
        if batch:
            raise RuntimeError("the batch's transaction failed")
        (delivery,) = deliveries
        if delivery.tag == 1:
            raise RuntimeError("this one fails alone")
        worker.settler.ack_current(delivery)

    monkeypatch.setattr(worker, "process", process)
    worker.process_or_hand_back(batch)
    assert channel.sent == [("ack", 2, False), ("ack", 3, False), ("reject", 1, True)]
