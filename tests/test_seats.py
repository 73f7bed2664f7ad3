"""Seats: the capacity, the waiting list, cancelling, and the promise that a
freed seat goes to exactly one waiting guest (services/seats.py). Fast tier:
the in-memory transport and the worker loop in this process; the concurrent
requests run as threads against the real database (SQLite here, PostgreSQL in
bin/test's PostgreSQL leg: marked `postgres`)."""

import io
import threading

import pytest
from django.db import close_old_connections, connection

from nightjar_delivery import transport
from nightjar_delivery.reconcile import reconcile
from nightjar_delivery.worker import Worker
from tickets.handler import handle
from tickets.models import Registration, RejectedMessage, Seat, StaffAction, Ticket
from tickets.services import seats
from tickets.services.reconcile import registrations_channel
from tickets.services.registrations import NightjarError, pending_registrations, register_guest, retry_registration

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]

STAFF = "organiser (test)"


def drain() -> int:
    worker = Worker(handler=handle, stdout=io.StringIO())
    worker.connect()
    try:
        return worker.drain()
    finally:
        worker.close()


def ready() -> int:
    return transport.queue_counts(transport.queue_name())["ready"]


def guests(count: int, prefix: str = "Guest") -> list[Registration]:
    return [register_guest(name=f"{prefix} {i}") for i in range(1, count + 1)]


def test_the_evening_has_room_for_everyone_until_staff_set_a_capacity():
    assert seats.capacity() is None
    everyone = guests(5)
    assert {r.seat for r in everyone} == {Seat.CONFIRMED} and ready() == 5


def test_a_full_evening_stores_the_registration_as_waiting_in_order_and_publishes_nothing_for_it():
    seats.set_capacity(capacity=2, actor=STAFF)
    first, second, third, fourth = guests(4)
    assert [r.seat for r in (first, second, third, fourth)] == ["confirmed", "confirmed", "waiting", "waiting"]
    assert ready() == 2  # only the two with a seat were published
    assert [seats.waiting_place(r) for r in (first, third, fourth)] == [None, 1, 2]
    drain()
    assert Ticket.objects.count() == 2 and not third.tickets.exists()
    assert list(pending_registrations()) == []  # waiting guests are not pending: reconcile leaves them alone
    assert seats.seat_counts() == seats.SeatCounts(capacity=2, confirmed=2, waiting=2, cancelled=0)


def test_a_cancellation_gives_the_seat_to_the_first_waiting_guest_in_the_same_transaction():
    seats.set_capacity(capacity=2, actor=STAFF)
    first, _, third, fourth = guests(4)
    drain()
    done = seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)
    assert [r.pk for r in done.promoted] == [third.pk]
    third.refresh_from_db()
    fourth.refresh_from_db()
    assert (third.seat, fourth.seat, seats.waiting_place(fourth)) == ("confirmed", "waiting", 1)
    assert ready() == 1  # third's ticket published after commit
    drain()
    assert third.tickets.count() == 1 and not fourth.tickets.exists()
    actions = list(StaffAction.objects.order_by("id").values_list("action", "registration_id"))
    assert actions[-2:] == [("cancel", first.pk), ("promote", third.pk)]


def test_cancelling_a_waiting_guest_frees_no_seat_and_the_list_closes_up():
    seats.set_capacity(capacity=1, actor=STAFF)
    _, second, third = guests(3)
    assert seats.cancel_registration(registration=second, actor=STAFF, reason="asked by phone").promoted == []
    third.refresh_from_db()
    assert (third.seat, seats.waiting_place(third)) == ("waiting", 1)
    assert StaffAction.objects.filter(action="cancel", detail="asked by phone").exists()


def test_a_repeated_cancel_is_refused_and_changes_nothing():
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second, third = guests(3)
    seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)
    with pytest.raises(seats.AlreadyCancelled, match=f"{first.code} was already cancelled"):
        seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)
    third.refresh_from_db()
    assert third.seat == "waiting"  # the second cancel promoted no one else
    assert seats.seat_counts().confirmed == 1


def test_raising_the_capacity_promotes_waiting_guests_in_order_and_lowering_below_seats_taken_is_refused():
    seats.set_capacity(capacity=1, actor=STAFF)
    everyone = guests(4)
    promoted = seats.set_capacity(capacity=3, actor=STAFF)
    assert [r.pk for r in promoted] == [everyone[1].pk, everyone[2].pk]
    with pytest.raises(seats.CapacityRefused, match="3 seats are taken, so the capacity cannot be 2"):
        seats.set_capacity(capacity=2, actor=STAFF)
    assert seats.capacity() == 3
    assert [a.detail for a in StaffAction.objects.filter(action="capacity").order_by("id")] == [
        "Capacity room for everyone → 1 seats.",
        "Capacity 1 seats → 3 seats.",
    ]
    seats.set_capacity(capacity=None, actor=STAFF)  # room for everyone: the rest come in
    assert seats.seat_counts().waiting == 0


@pytest.mark.parametrize(
    "typed, sentence",
    [
        ("0", "at least one seat"),
        ("-5", "at least one seat"),
        ("20000000", "more than this site can seat"),
        ("twenty", "is not a number of seats"),
        ("2.5", "is not a number of seats"),
        ("٣", "is not a number of seats"),
        ("9" * 400, "is not a number of seats"),
    ],
)
def test_a_capacity_that_is_not_a_number_of_seats_is_refused_with_a_sentence(typed, sentence):
    seats.set_capacity(capacity=5, actor=STAFF)
    with pytest.raises(seats.CapacityRefused, match=sentence):
        seats.set_capacity(capacity=typed, actor=STAFF)
    assert seats.capacity() == 5
    assert StaffAction.objects.filter(action="capacity").count() == 1


def test_a_delivery_of_a_cancelled_or_waiting_registration_makes_no_ticket():
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = guests(2)
    seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)  # published before; cancelled now
    seats.set_capacity(capacity=None, actor=STAFF)
    # The promotion's publish and first's old delivery; a forged delivery of a waiting guest:
    waiting = register_guest(name="Late Guest")
    Registration.objects.filter(pk=waiting.pk).update(seat=Seat.WAITING)
    transport.publish(
        f'{{"id":"{waiting.code}","name":"Late Guest","v":1}}'.encode(), message_id="x", queue=transport.queue_name()
    )
    drain()
    assert not first.tickets.exists() and second.tickets.count() == 1 and not waiting.tickets.exists()
    reasons = sorted(RejectedMessage.objects.values_list("reason", flat=True))
    assert any(f"{first.code} is cancelled: it holds no seat" in reason for reason in reasons)
    assert any(f"{waiting.code} is waiting: it holds no seat" in reason for reason in reasons)


def test_retry_and_reconcile_refuse_or_skip_a_registration_without_a_seat():
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = guests(2)
    with pytest.raises(NightjarError, match=f"{second.code} is waiting: it holds no seat, so it is not retried"):
        retry_registration(code=second.code, actor=STAFF)
    report = reconcile(registrations_channel(), older_than=0, actor=STAFF)
    assert report.published == [first.code]  # the waiting one is not pending


def take_in_threads(count: int, work) -> list:
    """Run work(i) in `count` threads started together; each its own connection."""
    results: list = [None] * count
    start = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except Exception as error:  # noqa: BLE001 - the test shows what went wrong
            results[i] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    close_old_connections()
    return results


@pytest.mark.postgres
def test_concurrent_registrations_never_take_more_seats_than_the_capacity_and_the_rest_wait_in_order():
    seats.set_capacity(capacity=5, actor=STAFF)
    results = take_in_threads(24, lambda i: register_guest(name=f"Racing Guest {i}").pk)
    assert all(isinstance(pk, int) for pk in results), results
    confirmed = list(Registration.objects.filter(seat=Seat.CONFIRMED).values_list("pk", flat=True))
    waiting = list(Registration.objects.filter(seat=Seat.WAITING).order_by("pk").values_list("pk", flat=True))
    assert len(confirmed) == 5 and len(waiting) == 19
    assert max(confirmed) < min(waiting)  # arrival order: nobody confirmed after a guest who waits
    assert ready() == 5


@pytest.mark.postgres
def test_concurrent_cancellations_promote_one_waiting_guest_per_freed_seat_each_once():
    seats.set_capacity(capacity=6, actor=STAFF)
    everyone = guests(16)
    holders, queue = everyone[:6], everyone[6:]

    def cancel(i: int):
        # Every holder cancelled twice at once: one wins, the other is told it was already cancelled.
        try:
            return len(seats.cancel_registration(registration=holders[i % 6], actor=STAFF).promoted)
        except seats.AlreadyCancelled:
            return "already"

    results = take_in_threads(12, cancel)
    assert sorted(results, key=str) == [1] * 6 + ["already"] * 6, results
    confirmed = set(Registration.objects.filter(seat=Seat.CONFIRMED).values_list("pk", flat=True))
    assert confirmed == {r.pk for r in queue[:6]}
    assert StaffAction.objects.filter(action="promote").count() == 6
    assert ready() == 6 + 6  # the holders' first deliveries, and one per promotion
    drain()
    assert Ticket.objects.filter(registration__seat=Seat.CONFIRMED).count() == 6


@pytest.mark.postgres
def test_setting_the_capacity_while_guests_register_keeps_seats_within_it():
    def work(i: int):
        if i == 0:
            try:
                return seats.set_capacity(capacity=8, actor=STAFF)
            except seats.CapacityRefused as error:
                return error
        return register_guest(name=f"Busy Guest {i}").seat

    take_in_threads(20, work)
    counts = seats.seat_counts()
    # Either the capacity came first (8 seats, the rest wait) or was refused (more than 8 were in already).
    assert counts.capacity is None or counts.confirmed <= counts.capacity
    assert counts.confirmed + counts.waiting == 19


def test_status_and_audit_name_the_seats_and_the_totals_still_add_up():
    from django.core.management import call_command

    seats.set_capacity(capacity=3, actor=STAFF)
    everyone = guests(6)
    drain()
    seats.cancel_registration(registration=everyone[0], actor=STAFF)  # its ticket is void; R-4 promoted
    seats.cancel_registration(registration=everyone[5], actor=STAFF)  # a waiting guest leaves the list
    out = io.StringIO()
    call_command("status", stdout=out)
    lines = out.getvalue().splitlines()
    assert f"{everyone[0].code}  cancelled" in lines[0] and f"{everyone[4].code}  waiting" in lines[4]
    assert f"{everyone[3].code}  pending" in lines[3]
    assert "Seats: capacity 3, 3 taken, 0 free  waiting: 1  cancelled: 2" in lines
    from tickets.management.commands.status import as_json

    totals = as_json(None)["totals"]
    states = ("pending", "issued", "ticket_without_its_key", "key_without_ticket", "duplicate_tickets", "parked")
    assert sum(totals[state] for state in states) + totals["waiting"] + totals["cancelled"] == 6
    out = io.StringIO()
    call_command("audit", stdout=out)
    assert "Audit passed: 6 registrations" in out.getvalue()
    assert "Void: 1 cancelled registrations hold a ticket" in out.getvalue()


def test_audit_reports_more_seats_than_the_capacity_and_a_guest_skipped_on_the_waiting_list():
    from tickets.services.audit import audit_invariants

    seats.set_capacity(capacity=2, actor=STAFF)
    first, second, third, fourth = guests(4)
    # What no service does: a seat given past the capacity, to the later of two waiting guests.
    Registration.objects.filter(pk=fourth.pk).update(seat=Seat.CONFIRMED)
    violations = audit_invariants(pending_older_than=300).violations
    assert "more seats confirmed than the capacity: 3 of 2" in violations
    assert f"waiting ahead of a guest confirmed after them: {third.code}" in violations


def test_staff_set_the_capacity_in_the_admin_and_a_bad_one_is_refused_with_a_sentence(staff):
    guests(3)
    url = "/admin/tickets/evening/1/change/"
    assert staff.get(url).status_code == 200
    page = staff.post(url, {"capacity": "2"}).content.decode()
    assert "3 seats are taken, so the capacity cannot be 2" in page and seats.capacity() is None
    page = staff.post(url, {"capacity": "lots"}).content.decode()
    assert "is not a number of seats" in page and seats.capacity() is None
    assert staff.post(url, {"capacity": "3"}).status_code == 302 and seats.capacity() == 3
    action = StaffAction.objects.get(action="capacity")
    assert action.actor == "desk (admin)" and action.detail == "Capacity room for everyone → 3 seats."


def test_staff_cancel_in_the_admin_needs_the_permission_a_reason_and_a_confirmation(client, staff):
    from django.contrib.auth.models import Permission, User

    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = guests(2)
    changelist = "/admin/tickets/registration/"
    chosen = {"action": "cancel_registrations", "_selected_action": [first.pk]}
    page = staff.post(changelist, chosen).content.decode()
    assert "Cancel registrations" in page and first.code in page  # the plan, nothing changed yet
    staff.post(changelist, {**chosen, "confirm": "cancel", "reason": ""})  # no reason: refused
    first.refresh_from_db()
    assert first.seat == "confirmed"
    staff.post(changelist, {**chosen, "confirm": "cancel", "reason": "Called to say she is ill"})
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.seat, second.seat) == ("cancelled", "confirmed")
    assert StaffAction.objects.get(action="cancel").detail == "Called to say she is ill"
    # Staff who may change registrations but not cancel them do not get the action.
    clerk = User.objects.create_user("clerk", password="x", is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=["view_registration", "change_registration"]))
    client.force_login(clerk)
    assert "cancel_registrations" not in client.get(changelist).content.decode()
    response = client.post(changelist, {**chosen, "_selected_action": [second.pk], "confirm": "cancel", "reason": "x"})
    second.refresh_from_db()
    assert response.status_code in (200, 302) and second.seat == "confirmed"


def test_staff_confirming_a_cancel_the_guest_made_meanwhile_are_told_so_and_their_reason_is_not_kept(staff):
    """The plan showed R-0001; the guest cancelled from their own link before
    staff pressed "Yes, cancel": one cancellation, one promotion, and staff
    are told there was nothing left to do, not sent back without a word."""
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = guests(2)
    changelist = "/admin/tickets/registration/"
    chosen = {"action": "cancel_registrations", "_selected_action": [first.pk]}
    assert first.code in staff.post(changelist, chosen).content.decode()  # the plan
    seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)
    answer = staff.post(changelist, {**chosen, "confirm": "cancel", "reason": "Called to say she is ill"}, follow=True)
    told = answer.content.decode()
    assert "Every selected registration is already cancelled; there is nothing to cancel." in told
    assert "The reason you gave was not recorded: nothing needed it." in told
    assert (
        f"Already cancelled, left alone: {first.code} Guest 1 (cancelled, by the guest (registration page) at" in told
    )
    assert [a.detail for a in StaffAction.objects.filter(action="cancel")] == ["Cancelled by the guest."]
    second.refresh_from_db()
    assert second.seat == "confirmed" and StaffAction.objects.filter(action="promote").count() == 1


def page(client, registration, suffix: str = "") -> str:
    return client.get(f"/registrations/{registration.code}/{registration.secret}/{suffix}").content.decode()


def test_a_waiting_guest_sees_their_place_and_the_page_moves_on_when_a_seat_frees_up(client):
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second, third = guests(3)
    shown = page(client, third)
    assert "The evening is full: you are on the waiting list" in shown and "<strong>2</strong>" in shown
    told = client.get(f"/registrations/{third.code}/{third.secret}/ticket/", follow=True).content.decode()
    assert "You are on the waiting list; there is no ticket yet." in told
    assert "registration.js" in shown  # it polls, as the page of a guest with a seat does
    status = client.get(f"/registrations/{third.code}/{third.secret}/status.json").json()
    assert (status["state"], status["place"], status["ready"]) == ("waiting", 2, False)
    seats.cancel_registration(registration=first, actor=seats.GUEST_ACTOR)
    status = client.get(f"/registrations/{second.code}/{second.secret}/status.json").json()
    assert (status["state"], status["place"]) == ("pending", None)
    assert "Your ticket is being prepared" in page(client, second)
    assert client.get(f"/registrations/{third.code}/{third.secret}/status.json").json()["place"] == 1
    drain()
    status = client.get(f"/registrations/{second.code}/{second.secret}/status.json").json()
    assert status["state"] == "ready" and status["ticket_url"].endswith("/ticket/")


def test_a_guest_cancels_from_their_page_after_a_confirmation_and_the_ticket_no_longer_downloads():
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    seats.set_capacity(capacity=1, actor=STAFF)
    first, second = guests(2)
    drain()
    download = f"/registrations/{first.code}/{first.secret}/ticket/download/"
    assert browser.get(download).status_code == 200  # downloads while it holds the seat
    url = f"/registrations/{first.code}/{first.secret}/cancel/"
    asked = browser.get(url)
    assert asked.status_code == 200 and "Cancel your registration?" in asked.content.decode()
    assert "no-store" in asked["Cache-Control"]
    assert browser.post(url).status_code == 403  # no CSRF token: a forged POST changes nothing
    first.refresh_from_db()
    assert first.seat == "confirmed"
    token = browser.cookies["csrftoken"].value
    done = browser.post(url, {"csrfmiddlewaretoken": token}, follow=True)
    shown = done.content.decode()
    assert "Your registration is cancelled." in shown and "This registration is cancelled" in shown
    assert "Cancel registration" not in shown and "registration.js" not in shown
    again = browser.post(url, {"csrfmiddlewaretoken": token}, follow=True).content.decode()
    assert "This registration was already cancelled." in again
    assert StaffAction.objects.filter(action="cancel").count() == 1 and seats.seat_counts().confirmed == 1
    assert browser.get(download).status_code == 404
    assert browser.get(f"/registrations/{first.code}/{first.secret}/ticket/").status_code == 302
    assert browser.get(f"/registrations/{first.code}/{first.secret}/status.json").json()["state"] == "cancelled"


def test_a_cancel_of_an_unknown_or_foreign_registration_is_a_404_and_changes_nothing(client):
    first, second = guests(2)
    for url in (
        f"/registrations/{first.code}/{second.secret}/cancel/",  # another guest's secret
        f"/registrations/R-99999999/{first.secret}/cancel/",
        f"/registrations/{first.code}/x/cancel/",
        "/registrations/R-0001x/abc/cancel/",
    ):
        assert client.post(url).status_code == 404
    assert seats.seat_counts().cancelled == 0


def test_too_many_cancel_posts_from_one_address_are_refused(client, settings):
    settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE = 2
    mine = guests(3)
    answers = [client.post(f"/registrations/{r.code}/{r.secret}/cancel/").status_code for r in mine]
    assert answers == [302, 302, 429] and seats.seat_counts().cancelled == 2


def test_the_door_answers_a_cancelled_registrations_ticket_red():
    from door.services import judge_ticket

    (guest,) = guests(1)
    drain()
    ticket = guest.tickets.get()
    assert judge_ticket(ticket).colour == "green"
    seats.cancel_registration(registration=guest, actor=STAFF)
    ticket.refresh_from_db()
    verdict = judge_ticket(Ticket.objects.select_related("registration").get(pk=ticket.pk))
    assert (verdict.colour, verdict.sentence) == ("red", "Cancelled") and "void" in verdict.detail


def test_the_seats_command_sets_the_capacity_cancels_with_a_reason_and_refuses_bad_input():
    from django.core.management import CommandError, call_command

    out = io.StringIO()
    call_command("seats", "--capacity", "1", stdout=out)
    first, second = guests(2)
    for args, sentence in [
        (["--capacity", "-3"], "at least one seat"),
        (["--capacity", "lots"], "is not a number of seats"),
        (["--capacity", ""], "Give a number of seats"),
        (["--cancel", first.code], "Say why with --reason"),
        (["--cancel", "R-99999999", "--reason", "x"], "There is no registration R-99999999"),
    ]:
        with pytest.raises(CommandError, match=sentence):
            call_command("seats", *args, stdout=out)
    call_command("seats", "--cancel", first.code, "--reason", "phoned in", stdout=out)
    assert f"{first.code} cancelled; its seat went to {second.code}." in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "Seats: capacity 1, 1 taken, 0 free  waiting: 0  cancelled: 1"
    with pytest.raises(CommandError, match="already cancelled"):
        call_command("seats", "--cancel", first.code, "--reason", "again", stdout=out)


def test_the_desk_shows_seats_taken_and_free_the_waiting_list_and_cancellations_with_a_chart(staff):
    seats.set_capacity(capacity=2, actor=STAFF)
    first, *_ = guests(4)
    seats.cancel_registration(registration=first, actor=STAFF)
    body = staff.get("/admin/tickets/registration/delivery-status/?fragment=1").content.decode()
    shown = " ".join(body.split())
    for words in (
        "2</span> capacity",
        "2</span> seats taken",
        "0</span> free",
        "1</span> waiting",
        "1</span> cancelled",
    ):
        assert words in shown, words
    assert "1 cancellations and 1 promotions, per 15 minutes." in shown


def test_metrics_have_the_seat_gauges(staff):
    seats.set_capacity(capacity=3, actor=STAFF)
    guests(4)
    text = staff.get("/metrics").content.decode()
    assert "nightjar_seats_capacity 3.0" in text
    assert "nightjar_registrations_confirmed 3.0" in text and "nightjar_registrations_waiting 1.0" in text


def test_scanning_a_cancelled_registrations_ticket_at_the_door_is_red_and_checks_nobody_in():
    from door.models import CheckIn
    from door.services import scan_ticket

    (guest,) = guests(1)
    drain()
    seats.cancel_registration(registration=guest, actor=seats.GUEST_ACTOR)
    answer = scan_ticket(code=guest.tickets.get().secret, scan_id="scan-1", actor="anna", door="front")
    assert (answer.colour, answer.sentence) == ("red", "Cancelled")
    assert not CheckIn.objects.exists()
