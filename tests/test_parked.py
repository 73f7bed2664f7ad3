"""The delivery limit and what happens after it. RabbitMQ before 4.3 (and
Redis's transport) counts every return of a delivery towards its backstop
limit — a Ctrl+C at a checkpoint, a restarted worker — not only failures.
Nightjar counts failures itself: what the backstop dead-letters is collected
from `.dead` into the database, parked for staff when the worker recorded
failures for it, published again when interruptions alone used up the limit.
Reconcile never republishes a parked registration."""

import signal
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command

from nightjar_delivery import transport
from tests.helpers import break_tickets_table, mend_tickets_table
from tickets import contract
from tickets.models import DeliveryFailure, ParkedDelivery, RejectedMessage, StaffAction
from tickets.services.registrations import parked_without_ticket, register_guest

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
LIMIT = 2  # the broker's backstop (Redis: the transport's) dead-letters on the third return


@pytest.fixture
def low_limit(workers, worker_env, settings):
    settings.NIGHTJAR_DELIVERY_LIMIT = LIMIT  # the queue is declared with it: the workers must agree
    workers.env = {**worker_env, "NIGHTJAR_DELIVERY_LIMIT": str(LIMIT)}
    return workers


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def interrupt_at_a_checkpoint(workers) -> str:
    worker = workers.start("--pause", "before-write")
    worker.wait_for("Paused before-write")
    worker.signal(signal.SIGINT)
    status, output = worker.finish()
    assert status == 130, output
    return output


def fail_until_parked(workers, registration) -> None:
    """The worker parks it itself once its failures reach the limit (before the broker's)."""
    break_tickets_table()
    try:
        for _ in range(LIMIT - 1):
            assert workers.run().returncode == 1
        assert f"Parked {registration.code}" in workers.run().stdout
        assert "No ready registrations" in workers.run().stdout
    finally:
        mend_tickets_table()
    assert transport.queue_counts(transport.queue_name())["dead"] == 0


def test_interruptions_alone_use_up_the_limit_but_the_registration_comes_back(low_limit):
    registration = register_guest(name="Often Interrupted")
    outputs = [interrupt_at_a_checkpoint(low_limit) for _ in range(LIMIT + 1)]
    assert "No ready registrations" in low_limit.run().stdout  # dead-lettered (Redis: by this read)
    assert "No failure is recorded, so it never counts towards parking (2 failed attempts)." in outputs[0]
    who = {
        "amqp": "RabbitMQ before 4.3 counts returns too and past 2 moves it to the dead-letter queue",
        "redis_streams": "past 2 returns the worker moves it to the dead-letter stream",
        "database": "past 2 returns the worker moves it to the dead-letter queue",
    }[transport.kind()]
    assert f"It has gone back 1 time(s); {who}, and the next reconcile publishes it again." in outputs[0]
    assert "It has gone back 3 time(s)" in outputs[-1]
    assert transport.queue_counts(transport.queue_name())["dead"] == 1

    # Inside the grace period reconcile republishes nothing, but it collects.
    output = run("reconcile", "--older-than", "3600")
    assert f"Requeued {registration.code}: dead-lettered by interruptions alone" in output
    assert transport.queue_counts(transport.queue_name())["dead"] == 0
    assert f"Received {registration.code}" in low_limit.run().stdout
    assert registration.tickets.count() == 1
    assert not ParkedDelivery.objects.holding().exists()


def test_a_registration_that_keeps_failing_is_parked_with_its_error_and_reconcile_leaves_it(low_limit):
    registration = register_guest(name="Always Failing")
    fail_until_parked(low_limit, registration)
    assert DeliveryFailure.objects.filter(registration=registration).count() == LIMIT

    output = run("reconcile", "--older-than", "0")
    assert "Republished 0" in output  # parked, so not republished
    assert run("reconcile", "--older-than", "0").count("Republished 0") == 1
    assert low_limit.run().stdout.strip() == "No ready registrations"

    parked = ParkedDelivery.objects.get(registration=registration)
    assert "tickets_ticket" in parked.reason and parked.attempts >= LIMIT
    assert registration.code in run("parked") and "1 parked deliveries wait for staff" in run("parked")
    status = run("status")
    assert f"{registration.code}  parked" in status and "Parked: 1 (1 waiting for staff" in status
    audit = StringIO()
    call_command("audit", stdout=audit)  # parked is not a violation, but it is reported
    assert "Waiting for staff: 1 parked" in audit.getvalue() and "0 dead-lettered" in audit.getvalue()

    assert f"Requeued {registration.code}" in run("parked", "requeue", registration.code)
    assert f"Received {registration.code}" in low_limit.run().stdout
    assert registration.tickets.count() == 1
    assert StaffAction.objects.get(registration=registration, action="requeue").actor.endswith(
        "(manage.py parked requeue)"
    )


def test_a_discarded_registration_stays_parked_and_out_of_the_waiting_list(low_limit):
    registration = register_guest(name="Given Up")
    fail_until_parked(low_limit, registration)
    run("parked", "collect")
    assert "Discarded" in run("parked", "discard", registration.code)
    assert "0 parked deliveries wait for staff" in run("parked")
    assert registration.code in [r.code for r in parked_without_ticket()]
    assert "Republished 0" in run("reconcile", "--older-than", "0")
    with pytest.raises(Exception, match="no parked delivery waiting"):
        call_command("parked", "discard", registration.code)


def test_a_hostile_body_found_in_the_dead_letter_queue_becomes_a_rejected_message():
    transport.queue_counts(transport.queue_name())  # declares both queues
    transport.publish_raw([b"[" * 2000 + b"]" * 2000, b"\x00"], dead=True)
    output = run("parked", "collect")
    assert "2 rejected messages" in output
    assert RejectedMessage.objects.count() == 2
    assert transport.queue_counts(transport.queue_name())["dead"] == 0


def test_staff_requeue_from_the_parked_desk_after_a_plan_and_view_only_staff_cannot(low_limit, client):
    registration = register_guest(name="Desk Requeue")
    fail_until_parked(low_limit, registration)
    run("parked", "collect")
    parked = ParkedDelivery.objects.get(registration=registration)
    url = "/admin/tickets/parkeddelivery/"

    viewer = User.objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_parkeddelivery"))
    client.force_login(viewer)
    assert "Requeue: publish again" not in client.get(url).content.decode()
    client.post(url, {"action": "requeue", "_selected_action": [parked.pk], "confirm": "requeue"})
    assert ParkedDelivery.objects.get(pk=parked.pk).resolution == ""

    client.force_login(User.objects.create_superuser("desk", "desk@example.org", "pw-desk-123"))
    page = client.get(url).content.decode()
    assert registration.code in page and "tickets_ticket" in page
    plan = client.post(url, {"action": "requeue", "_selected_action": [parked.pk]})
    assert f"{registration.code}: publish again" in plan.content.decode()
    assert ParkedDelivery.objects.get(pk=parked.pk).resolution == ""  # only a plan so far
    done = client.post(url, {"action": "requeue", "_selected_action": [parked.pk], "confirm": "requeue"}, follow=True)
    assert f"{registration.code}: requeued." in done.content.decode()
    assert f"Received {registration.code}" in low_limit.run().stdout
    assert registration.tickets.count() == 1
    assert contract.format_code(registration.pk) in str(StaffAction.objects.get(action="requeue"))
