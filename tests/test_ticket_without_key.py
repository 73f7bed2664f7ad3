"""A ticket without its key — what the lab's starting handler (ack first, no
completion key) leaves behind — is not pending: no path may publish it
again, because the safe handler would find the key new and make a second
ticket. `repair --apply` adds the key; status and audit name the state. Each
test makes the keyless ticket with the real starting handler, run as a real
worker process, then runs the safe handler over whatever was published."""

import signal
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from nightjar_delivery import transport
from tests.conftest import ROOT
from tickets import contract
from tickets.models import Completion, ParkedDelivery, Registration
from tickets.services.reconcile import collect_dead_letters, requeue_parked
from tickets.services.registrations import NightjarError, pending_registrations, register_guest

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

START_HANDLER = str(ROOT / "tickets" / "lab_files" / "start_handler.py")


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def keyless_ticket(workers, name: str = "Early Ack") -> Registration:
    """A registration whose ticket the starting handler made (it writes no key),
    registered long enough ago that reconcile's grace period is over."""
    registration = register_guest(name=name)
    result = workers.run("--handler", START_HANDLER)
    assert f"Received {registration.code}" in result.stdout, result.stdout + result.stderr
    assert registration.tickets.count() == 1
    assert not Completion.objects.filter(registration=registration).exists()
    Registration.objects.filter(pk=registration.pk).update(created=timezone.now() - timedelta(hours=1))
    return registration


def safe_worker_makes_no_second_ticket(workers, registration: Registration) -> None:
    result = workers.run("--drain")
    assert result.returncode == 0, result.stdout + result.stderr
    assert registration.tickets.count() == 1, result.stdout
    assert transport.queue_counts(transport.queue_name())["ready"] == 0


def test_reconcile_does_not_publish_a_ticket_without_its_key(workers):
    registration = keyless_ticket(workers)
    output = run("reconcile", "--older-than", "0")
    assert registration.code not in output
    assert transport.queue_counts(transport.queue_name())["ready"] == 0
    safe_worker_makes_no_second_ticket(workers, registration)
    assert pending_registrations().count() == 0


def test_reconcile_timer_of_a_serving_worker_does_not_publish_it(workers):
    registration = keyless_ticket(workers)
    waiting = register_guest(name="Lost Publish")
    transport.purge_queues()  # its publish was lost: only the timer's reconcile can bring it
    Registration.objects.filter(pk=waiting.pk).update(created=timezone.now() - timedelta(hours=1))
    worker = workers.start("--serve", "--reconcile-every", "0.2", "--older-than", "0")
    worker.wait_for("Reconcile republished 1")
    worker.wait_for(f"Received {waiting.code}")
    worker.wait_for("Handler returned.")
    worker.signal(signal.SIGTERM)
    status, output = worker.finish()
    assert status == 0, output
    assert f"Received {registration.code}" not in output
    assert registration.tickets.count() == 1
    assert waiting.tickets.count() == 1


def test_the_desks_reconcile_button_does_not_publish_it(workers, staff):
    registration = keyless_ticket(workers)
    page = staff.post("/admin/tickets/registration/delivery-status/reconcile/", follow=True).content.decode()
    assert "Reconcile republished 0 registration(s), 0 still due" in page
    safe_worker_makes_no_second_ticket(workers, registration)


def test_retry_refuses_a_ticket_without_its_key_and_says_what_to_do(workers, staff):
    registration = keyless_ticket(workers)
    with pytest.raises(CommandError, match=f"repair {registration.code} --apply") as refused:
        call_command("retry", registration.code)
    assert refused.value.returncode == 1
    page = staff.post(
        "/admin/tickets/registration/",
        {"action": "retry_delivery", "_selected_action": [registration.pk]},
        follow=True,
    ).content.decode()
    assert f"{registration.code} not retried" in page
    safe_worker_makes_no_second_ticket(workers, registration)


def test_requeue_of_a_parked_registration_refuses_a_ticket_without_its_key(workers):
    registration = keyless_ticket(workers)
    ParkedDelivery.objects.create(registration=registration, reason="failed until the limit", attempts=3)
    with pytest.raises(NightjarError, match="without its key"):
        requeue_parked(registration, actor="test")
    assert ParkedDelivery.objects.holding().filter(registration=registration).exists()
    safe_worker_makes_no_second_ticket(workers, registration)


def test_collecting_its_dead_letter_does_not_publish_it_again(workers):
    registration = keyless_ticket(workers)
    body = contract.encode(registration_id=registration.pk, name=registration.name)
    transport.publish_raw([body], dead=True)  # its delivery was dead-lettered before the ack-first handler ran
    report = collect_dead_letters()
    assert (report.requeued, report.parked, report.dropped) == ([], [], 1)
    safe_worker_makes_no_second_ticket(workers, registration)


def test_repair_adds_the_key_and_status_and_audit_name_the_state(workers):
    registration = keyless_ticket(workers)
    assert f"{registration.code}  ticket without its key " in run("status")
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit", stdout=out)
    assert failed.value.returncode == 1
    assert f"ticket without its key: {registration.code}" in out.getvalue()
    run("repair", registration.code, "--apply")
    assert Completion.objects.filter(registration=registration).exists()
    assert f"{registration.code}  ticket issued " in run("status")
    assert registration.tickets.count() == 1
