"""Seats against the real broker and real worker processes: the issue's
"Done when" evening (20 seats, 30 guests, 3 cancel), a worker killed around a
promoted guest's ticket, a cancellation while the ticket is being made, and a
cancellation while the broker is down."""

import signal

import pytest
from django.core.management import call_command

from door.services import judge_ticket
from nightjar_delivery.reconcile import reconcile
from tests.test_seats import take_in_threads
from tickets.models import Registration, Seat, Ticket
from tickets.services import seats
from tickets.services.audit import audit_invariants
from tickets.services.reconcile import registrations_channel
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STAFF = "organiser (test)"


def drained(workers) -> str:
    result = workers.run("--drain")
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_twenty_seats_thirty_guests_three_cancel_and_exactly_the_first_three_waiting_get_tickets(workers, capsys):
    seats.set_capacity(capacity=20, actor=STAFF)
    # Thirty guests at once (each its own connection), as thirty browsers would.
    pks = take_in_threads(30, lambda i: register_guest(name=f"Evening Guest {i:02d}").pk)
    assert all(isinstance(pk, int) for pk in pks), pks
    arrival = list(Registration.objects.order_by("pk"))
    seated, waiting = arrival[:20], arrival[20:]
    assert [r.seat for r in arrival] == ["confirmed"] * 20 + ["waiting"] * 10
    drained(workers)
    assert Ticket.objects.count() == 20

    leaving = [seated[1], seated[8], seated[15]]
    promoted = [seats.cancel_registration(registration=r, actor=seats.GUEST_ACTOR).promoted for r in leaving]
    assert [[r.pk for r in p] for p in promoted] == [[waiting[0].pk], [waiting[1].pk], [waiting[2].pk]]
    drained(workers)

    with_ticket = set(Ticket.objects.values_list("registration_id", flat=True))
    assert with_ticket == {r.pk for r in seated} | {r.pk for r in waiting[:3]}
    assert Ticket.objects.count() == 23  # 20 first, one per promotion; none twice
    counts = seats.seat_counts()
    assert (counts.capacity, counts.confirmed, counts.waiting, counts.cancelled) == (20, 20, 7, 3)
    confirmed = Registration.objects.filter(seat=Seat.CONFIRMED)
    assert all(r.tickets.count() == 1 for r in confirmed)
    for r in leaving:  # their tickets are void: red at the door
        assert judge_ticket(Ticket.objects.select_related("registration").get(registration=r)).colour == "red"
    report = audit_invariants(pending_older_than=0)
    assert report.passed, report.violations
    assert report.void_tickets == 3
    with capsys.disabled():
        print(
            f"\n[done-when] 30 concurrent registrations on 20 seats: {counts.confirmed} confirmed, "
            f"10 waiting; 3 cancelled → promoted {[r[0].code for r in promoted]}; "
            f"tickets {Ticket.objects.count()} (one per confirmed guest, 3 void); audit passed"
        )


@pytest.mark.parametrize("checkpoint", ["before-write", "inside-transaction", "after-commit"])
def test_a_worker_killed_around_a_promoted_guests_ticket_ends_with_one_ticket(checkpoint, workers):
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = register_guest(name="Holder"), register_guest(name="Next In Line")
    drained(workers)
    seats.cancel_registration(registration=first, actor=STAFF)  # second promoted, published after commit

    worker = workers.start("--pause", checkpoint)
    worker.wait_for(f"Received {second.code} redelivered=False")
    worker.wait_for(f"Paused {checkpoint}.")
    worker.signal(signal.SIGKILL)
    assert worker.finish()[0] == -signal.SIGKILL

    assert f"Received {second.code} redelivered=True" in drained(workers)
    assert second.tickets.count() == 1 and Ticket.objects.count() == 2  # the holder's (void) and second's
    assert audit_invariants(pending_older_than=0).passed


def test_a_cancellation_while_the_ticket_is_being_made_leaves_a_void_ticket_and_the_invariant_held(
    workers, client, capsys
):
    guest = register_guest(name="Changed Mind")
    worker = workers.start("--pause", "before-write")  # screened: it had a seat when the worker read it
    worker.wait_for("Paused before-write.")
    seats.cancel_registration(registration=guest, actor=seats.GUEST_ACTOR)
    worker.send("")
    worker.wait_for("Handler returned.")
    assert worker.finish()[0] == 0

    ticket = Ticket.objects.select_related("registration").get(registration=guest)
    assert client.get(f"/registrations/{guest.code}/{guest.secret}/ticket/download/").status_code == 404
    assert judge_ticket(ticket).colour == "red"
    report = audit_invariants(pending_older_than=0)
    assert report.passed and report.void_tickets == 1
    call_command("audit")
    assert "Void: 1 cancelled registrations hold a ticket" in capsys.readouterr().out


@pytest.mark.broker_service
def test_a_cancel_while_the_broker_is_down_keeps_the_promotion_and_reconcile_publishes_it(rabbit, workers):
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = register_guest(name="Leaving Guest"), register_guest(name="Waiting Guest")
    drained(workers)
    with rabbit.down():
        done = seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)  # the publish fails, logged
    assert [r.pk for r in done.promoted] == [second.pk]
    assert not second.tickets.exists()
    report = reconcile(registrations_channel(), older_than=0, actor=STAFF)
    assert report.published == [second.code]
    drained(workers)
    assert second.tickets.count() == 1 and audit_invariants(pending_older_than=0).passed
