"""A publish RabbitMQ refuses (a nack: what a quorum queue electing a new
leader answers) is not an unreachable broker: it is tried again within the
caller's deadline, and it never makes the next publishes skip the broker —
that backoff is for brokers that cannot be reached."""

import pytest

from nightjar_delivery import transport
from tickets.models import Registration
from tickets.services.registrations import publish_registration

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True), pytest.mark.amqp_only]


def test_a_refused_publish_does_not_make_the_next_ones_skip_the_broker(rabbit, settings):
    transport.queue_counts(transport.queue_name())  # declares the queue
    # A real nack from the real broker: every publish to this queue overflows.
    policy = ["set_policy", "--apply-to", "queues", "refuse-all", f"^{settings.NIGHTJAR_QUEUE}$"]
    rabbit.ctl(*policy, '{"max-length": 1, "overflow": "reject-publish"}')
    try:
        refused = Registration.objects.create(name="Refused Guest")
        accepted = 0
        while True:  # a quorum queue's limit is soft: it refuses once it is over it
            try:
                publish_registration(refused)
            except transport.BrokerError as error:
                assert "refused the message" in str(error)
                break
            accepted += 1
            assert accepted <= 3, "RabbitMQ never refused a publish past max-length"
        for _ in range(2):  # the second is refused by RabbitMQ too, not skipped by a backoff
            with pytest.raises(transport.BrokerError, match="refused the message"):
                publish_registration(refused)
    finally:
        rabbit.ctl("clear_policy", "refuse-all")
    publish_registration(Registration.objects.create(name="Next Guest"))  # no backoff in the way
    assert transport.queue_counts(transport.queue_name())["ready"] == accepted + 1
