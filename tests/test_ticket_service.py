"""One ticket-issuing service (tickets/services/tickets.py): the worker's
handler and batch handler and repair issue through it, so a post_save
receiver a project connects for tickets hears every ticket the product
issues (the plain INSERT is taken only when nobody listens), and the
domain's tickets_issued signal is sent once per issue whichever way."""

import io

import pytest
from django.db.models.signals import post_save

from nightjar_delivery.worker import Worker
from tickets import signals
from tickets.handler import handle
from tickets.models import Completion, Ticket
from tickets.services.registrations import register_guest
from tickets.services.repair import repair_registration

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def heard():
    """What a project's post_save receiver for tickets hears, and the registrations tickets_issued names."""
    saved: list[tuple[int, bool]] = []
    issued: list[int] = []

    def on_save(sender, instance, created, **kwargs):
        saved.append((instance.registration_id, created))

    def on_issue(sender, registration_ids, **kwargs):
        issued.extend(registration_ids)

    post_save.connect(on_save, sender=Ticket, dispatch_uid="test-ticket-save")
    signals.tickets_issued.connect(on_issue, dispatch_uid="test-tickets-issued")
    yield saved, issued
    post_save.disconnect(sender=Ticket, dispatch_uid="test-ticket-save")
    signals.tickets_issued.disconnect(dispatch_uid="test-tickets-issued")


@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
def test_a_post_save_receiver_hears_each_ticket_the_worker_issues(heard, batch):
    saved, issued = heard
    guests = [register_guest(name=f"Heard Guest {n}") for n in range(3)]
    worker = Worker(handler=handle, stdout=io.StringIO(), batch=batch)
    worker.connect()
    try:
        assert worker.drain() == 3
    finally:
        worker.close()
    assert sorted(saved) == [(guest.pk, True) for guest in guests]
    assert sorted(issued) == [guest.pk for guest in guests]
    assert Ticket.objects.count() == 3 and all(t.secret and t.issued for t in Ticket.objects.all())


def test_a_post_save_receiver_hears_the_ticket_repair_issues(heard):
    saved, issued = heard
    guest = register_guest(name="Repaired Guest")
    Completion.objects.create(registration=guest)  # a key whose ticket was deleted
    plan = repair_registration(code=guest.code, actor="desk")
    assert plan.summary() == "issued the missing ticket"
    assert saved == [(guest.pk, True)] and issued == [guest.pk]
    assert guest.tickets.count() == 1


def test_without_a_listener_the_worker_issues_with_its_plain_insert(monkeypatch):
    guest = register_guest(name="Quiet Guest")
    monkeypatch.setattr(Ticket, "save", lambda *args, **kwargs: pytest.fail("save() without a listener"))
    worker = Worker(handler=handle, stdout=io.StringIO(), batch=10)
    worker.connect()
    try:
        assert worker.drain() == 1
    finally:
        worker.close()
    assert guest.tickets.count() == 1
