"""Several worker processes racing over duplicated deliveries still make
exactly one ticket per registration."""

import pytest
from django.db.models import Count

from tickets import services
from tickets.models import Completion, Registration, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("mode", [(), ("--batch", "50")], ids=["per-delivery", "batch"])
def test_three_workers_draining_300_registrations_published_twice_make_300_tickets(mode, workers):
    registrations = [services.register_guest(name=f"Guest {n % 7}") for n in range(300)]
    for registration in registrations:
        services.retry_registration(code=registration.code, actor="test")

    running = [workers.start("--drain", *mode) for _ in range(3)]
    results = [worker.finish(timeout=180) for worker in running]

    assert [status for status, _ in results] == [0, 0, 0], results
    assert sum(int(output.split("Drained ")[1].split()[0]) for _, output in results) == 600
    assert Ticket.objects.count() == 300
    assert Completion.objects.count() == 300
    assert not Registration.objects.annotate(n=Count("tickets")).exclude(n=1).exists()
    assert workers.run(*mode).stdout.strip() == "No ready registrations"
