"""Several worker processes racing over duplicated deliveries still make
exactly one ticket per registration."""

import pytest
from django.db.models import Count

from tests.conftest import TRANSPORT
from tickets.models import Completion, Registration, Ticket
from tickets.services.registrations import register_guest, retry_registration

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("mode", [(), ("--batch", "50")], ids=["per-delivery", "batch"])
def test_three_workers_draining_300_registrations_published_twice_make_300_tickets(mode, workers):
    registrations = [register_guest(name=f"Guest {n % 7}") for n in range(300)]
    for registration in registrations:
        retry_registration(code=registration.code, actor="test")

    # One consumer name per worker, as each service instance has in production
    # (on Redis a shared name shares the pending list: see the test below).
    running = [
        workers.start("--drain", *mode, env={**workers.env, "NIGHTJAR_CONSUMER_NAME": f"w{n}"}) for n in range(3)
    ]
    results = [worker.finish(timeout=180) for worker in running]

    assert [status for status, _ in results] == [0, 0, 0], results
    assert sum(int(output.split("Drained ")[1].split()[0]) for _, output in results) == 600
    assert Ticket.objects.count() == 300
    assert Completion.objects.count() == 300
    assert not Registration.objects.annotate(n=Count("tickets")).exclude(n=1).exists()
    assert workers.run(*mode).stdout.strip() == "No ready registrations"


def test_two_workers_under_one_consumer_name_may_both_take_an_entry_yet_make_one_ticket(workers, rabbit):
    """On Redis a consumer name is a pending list: a worker that starts under a
    name another running worker uses reads that worker's unacknowledged
    entries as its own (redelivered=True). The completion key keeps it to one
    ticket. On RabbitMQ the name means nothing and this is plain competition."""
    registration = register_guest(name="Shared Name")
    env = {**workers.env, "NIGHTJAR_CONSUMER_NAME": "shared"}
    holder = workers.start("--pause", "after-commit", env=env)
    holder.wait_for("Paused after-commit.")  # committed, not acked
    second = workers.start(env=env)
    status, output = second.finish()
    assert status == 0, output
    if TRANSPORT == "redis":
        assert f"Received {registration.code} redelivered=True" in output  # the holder's entry, read as its own
    else:
        assert output.strip() == "No ready registrations"  # RabbitMQ: the unacked delivery belongs to the holder
    holder.send("")
    assert holder.finish()[0] == 0
    assert registration.tickets.count() == 1
    assert Completion.objects.filter(registration=registration).count() == 1
