"""Deliveries that are not what they claim to be, publishes that get lost,
and forms sent twice: nothing is lost and no ticket is invented."""

import hashlib
import subprocess
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from nightjar_delivery import channel, transport
from nightjar_delivery.recording import record_rejection
from tests.helpers import MODES, break_tickets_table, mend_tickets_table, register_by_form
from tickets.models import Completion, ParkedDelivery, Registration, RejectedMessage, Ticket
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import register_guest, retry_registration

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def amqp_publish(url: str, queue: str, body: bytes) -> None:
    """Publish with Debian's amqp-tools: a client that is not Nightjar's code."""
    subprocess.run(["amqp-publish", "--url", url, "-r", queue, "-p"], input=body, check=True, timeout=30)


@pytest.mark.broker
@pytest.mark.amqp_only  # amqp-publish; tests/test_hostile_bodies.py covers both transports
@MODES
def test_poison_messages_are_recorded_once_acked_and_make_no_ticket(mode, workers, test_settings):
    known = Registration.objects.create(name="Known Guest")
    valid = register_guest(name="Valid Guest")
    transport.queue_counts(transport.queue_name())  # declares the queue for amqp-publish
    poison = {
        b"{this is not json": "not valid JSON",
        b'{"id":"R-0002","name":"Known Guest","v":1,"admin":true}': "unknown: admin",
        b'{"id":"R-0002","name":"' + b"x" * 5000 + b'","v":1}': "the limit is 4096",
        b'{"id":"R-99999999","name":"Nobody","v":1}': "There is no registration R-99999999.",
        b'{"id":"' + known.code.encode() + b'","name":"Someone Else","v":1}': "does not match",
    }
    worker = workers.start("--serve", *mode)
    worker.wait_for(f"Received {valid.code} redelivered=False")
    worker.wait_for("Handler returned.")
    for body in poison:
        amqp_publish(test_settings.NIGHTJAR_BROKER_URL, test_settings.NIGHTJAR_QUEUE, body)
        worker.wait_for("Rejected a delivery")
    # The worker keeps going: a valid delivery after the poison is processed normally.
    retry_registration(code=valid.code, actor="test")
    worker.wait_for(f"Received {valid.code} redelivered=False")
    worker.wait_for("Handler returned.")

    assert RejectedMessage.objects.count() == len(poison)
    for body, reason in poison.items():
        record = RejectedMessage.objects.get(body_sha256=hashlib.sha256(body).hexdigest())
        assert reason in record.reason
        assert len(record.body_excerpt.encode()) <= RejectedMessage.MAX_EXCERPT
    assert RejectedMessage.objects.get(reason__contains="does not match").registration == known
    assert not known.tickets.exists()
    assert Ticket.objects.count() == 1 and valid.tickets.count() == 1
    assert transport.queue_counts(transport.queue_name())["ready"] == 0  # every poison message was acked


@pytest.mark.fast
def test_a_redelivered_poison_body_is_recorded_once():
    body = b"{broken"
    first = transport.Delivery(body=body, tag=1, redelivered=False, message_id="")
    again = transport.Delivery(body=body, tag=2, redelivered=True, message_id="")
    registrations = channel.get("registrations")
    assert record_rejection(delivery=first, reason="not valid JSON", channel=registrations) is not None
    assert record_rejection(delivery=again, reason="not valid JSON", channel=registrations) is None
    assert RejectedMessage.objects.count() == 1


@pytest.mark.broker
def test_registrations_made_while_rabbitmq_is_down_are_reconciled(client, rabbit, workers):
    with rabbit.down():
        for name in ("Offline One", "Offline Two", "Offline Three"):
            assert register_by_form(client, name).status_code == 302
    assert Registration.objects.count() == 3
    assert workers.run().stdout.strip() == "No ready registrations"

    out = StringIO()
    call_command("reconcile", "--older-than", "0", stdout=out)
    assert "Republished 3; 0 pending remain" in out.getvalue()
    drained = workers.run("--drain")
    assert "Drained 3 deliveries" in drained.stdout
    assert Ticket.objects.count() == 3

    out = StringIO()
    call_command("reconcile", "--older-than", "0", stdout=out)
    assert "Republished 0" in out.getvalue()
    assert workers.run().stdout.strip() == "No ready registrations"


@pytest.mark.broker
def test_reconcile_respects_the_grace_period_and_the_limit():
    old = [Registration.objects.create(name=f"Old {n}") for n in range(3)]
    Registration.objects.filter(pk__in=[r.pk for r in old]).update(created=timezone.now() - timedelta(minutes=5))
    Registration.objects.create(name="Fresh")  # inside the grace period: left alone
    report = reconcile_registrations(limit=2, older_than=60, catch_up=False)
    assert report.published == [old[0].code, old[1].code]  # oldest first
    assert report.remaining == 1
    report = reconcile_registrations(limit=2, older_than=60)  # catching up: passes until one is not full
    assert report.published == [r.code for r in old] and report.passes == 2 and report.remaining == 0


@pytest.mark.broker
def test_serve_with_reconcile_every_picks_up_a_lost_publish(workers):
    lost = Registration.objects.create(name="Lost Publish", created=timezone.now() - timedelta(minutes=5))
    worker = workers.start("--serve", "--reconcile-every", "0.5")
    worker.wait_for(f"Received {lost.code} redelivered=False")
    worker.wait_for("Handler returned.")
    assert lost.tickets.count() == 1


@pytest.mark.broker
@MODES
def test_serve_hands_back_a_delivery_that_hits_a_database_error(mode, workers):
    registration = register_guest(name="Database Trouble")
    break_tickets_table()
    try:
        worker = workers.start("--serve", *mode)
        worker.wait_for(f"back to {transport.name()} unacked")
        worker.wait_for(f"Received {registration.code} redelivered=True")
        assert Completion.objects.count() == 0  # rolled back each time
    finally:
        mend_tickets_table()
    worker.wait_for("Handler returned.")
    assert registration.tickets.count() == 1


@pytest.mark.broker
def test_a_delivery_that_keeps_failing_is_parked_by_the_worker_before_the_brokers_limit(workers, worker_env, settings):
    # Nightjar counts its own failure records: the promise must not depend on
    # what the broker counts (RabbitMQ 4.3 counts rejects only; 3.10 every return).
    settings.NIGHTJAR_DELIVERY_LIMIT = 2  # the queue is declared with it: the workers must agree
    workers.env = {**worker_env, "NIGHTJAR_DELIVERY_LIMIT": "2"}
    registration = register_guest(name="Always Failing")
    break_tickets_table()
    try:
        first = workers.run()
        assert first.returncode == 1, first.stdout + first.stderr
        second = workers.run()  # the second failure reaches the limit of 2: parked, then acked
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"Parked {registration.code}: its delivery failed 2 times" in second.stdout
        assert workers.run().stdout.strip() == "No ready registrations"
    finally:
        mend_tickets_table()
    # The broker would have dead-lettered it only after a third failed delivery: it never had to.
    assert transport.queue_counts(transport.queue_name())["dead"] == 0
    parked = ParkedDelivery.objects.get(registration=registration)
    assert "tickets_ticket" in parked.reason and "failed 2 times" in parked.reason and parked.attempts == 2
    out = StringIO()
    call_command("status", stdout=out)
    assert f"{registration.code}  parked" in out.getvalue()
    assert "Queue: 0 ready, 0 unacknowledged, " in out.getvalue() and " consumers, 0 dead-lettered" in out.getvalue()
    reconciled = StringIO()
    call_command("reconcile", "--older-than", "0", stdout=reconciled)
    assert "Republished 0" in reconciled.getvalue()  # parked: reconcile leaves it alone
    assert not registration.tickets.exists()


def submit(client, name: str, key: str):
    return client.post("/evening/", {"name": name, "submission_key": key})


@pytest.mark.fast
def test_the_same_form_sent_twice_makes_one_registration(client):
    first = submit(client, "Double Click", "key-1")
    second = submit(client, "Double Click", "key-1")
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Registration.objects.count() == 1


@pytest.mark.fast
def test_the_same_form_key_with_another_name_is_refused(client):
    submit(client, "First Name", "key-2")
    response = submit(client, "Other Name", "key-2")
    assert response.status_code == 200
    assert "This form was already used to register First Name" in response.content.decode()
    assert list(Registration.objects.values_list("name", flat=True)) == ["First Name"]


@pytest.mark.fast
def test_two_forms_with_the_same_name_are_two_registrations(client):
    submit(client, "Same name", "key-a")
    submit(client, "Same name", "key-b")
    assert Registration.objects.filter(name="Same name").count() == 2


@pytest.mark.broker
def test_a_worker_reads_the_registrations_of_waiting_deliveries_at_once_and_still_checks_each(monkeypatch):
    """Per-delivery mode reads the stored rows of the deliveries already in
    its buffer in one query (a query per delivery is a PostgreSQL round trip),
    yet every delivery is still checked against its own row: an unknown ID,
    another name, a repeat of the same registration, a row changed after it
    was read and a body that only looks like a message are each handled as
    if read alone."""
    from nightjar_delivery.worker import Worker
    from tickets import contract
    from tickets.handler import handle

    guests = [Registration.objects.create(name=f"Ahead Guest {i}") for i in range(30)]
    renamed = guests[20]
    bodies = [contract.encode(registration_id=guest.pk, name=guest.name) for guest in guests]
    strangers = [
        b'{"id":"R-99999999","name":"Nobody","v":1}',  # no such registration
        contract.encode(registration_id=guests[3].pk, name="Someone Else"),  # another name
        bodies[5],  # a repeat: its row was already used once
        b'{"id":"' + guests[7].code.encode() + b'","name":"Ahead Guest 7","v":1,"x":1}',  # the pattern, not a message
    ]
    transport.publish_raw(bodies[:20] + strangers + bodies[20:])
    queries = []
    real_stored = Registration.objects.stored
    monkeypatch.setattr(Registration.objects, "stored", lambda ids: queries.append(set(ids)) or real_stored(ids))

    worker = Worker(handler=handle, prefetch=50, stdout=StringIO())
    worker.connect()
    try:
        for delivery in worker.receiver.consumer.consume(idle_seconds=1.0):
            if delivery is None:
                break
            if contract.hinted_ids([delivery.body]) == {renamed.pk}:
                # Changed after it was read ahead, and the read grown old: read again.
                Registration.objects.filter(pk=renamed.pk).update(name="Renamed Guest")
                worker.screen.ahead_read -= 2
            worker.process([delivery])
        worker.receiver.consumer.flush_acks()
    finally:
        worker.close()

    reasons = sorted(RejectedMessage.objects.values_list("reason", flat=True))
    assert len(reasons) == 4 and worker.report.handled == 29 + 1  # 29 guests, and the repeat found its key
    assert any("There is no registration R-99999999" in reason for reason in reasons)
    # The stranger with another name, and the renamed guest:
    assert sum("does not match the stored registration" in reason for reason in reasons) == 2
    assert any("The keys must be exactly" in reason for reason in reasons)
    assert Ticket.objects.count() == 29 and not renamed.tickets.exists()
    assert all(guest.tickets.count() == 1 for guest in guests if guest != renamed)
    # Far fewer reads than deliveries (34): the buffer's rows came with the first.
    assert len(queries) <= 6, queries
    assert any(len(ids) > 10 for ids in queries)
    assert transport.queue_counts(transport.queue_name())["ready"] == 0
