"""The door's service: one check-in per ticket however often and wherever it
is scanned; red answers for anything that is not a ticket of this evening,
writing nothing but the scan; undo with a reason on the history."""

import contextlib
import http.client
import io
import json
import os
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from door import services
from door.models import CheckIn, Scan
from tests.conftest import database_url, start_gunicorn
from tickets.models import Registration, StaffAction, Ticket
from tickets.services.demo import seed_demo
from tickets.services.repair import repair_registration

pytestmark = pytest.mark.django_db


def mina() -> Ticket:
    registration, _ = seed_demo()
    return registration.tickets_in_order().get()


def scan(code, *, door="door 1", scan_id=None, **kwargs) -> services.Answer:
    return services.scan_ticket(code=code, scan_id=scan_id or uuid.uuid4().hex, actor="anna", door=door, **kwargs)


@pytest.mark.fast
def test_the_first_scan_checks_the_guest_in_and_a_later_one_is_amber_with_its_time_and_door():
    ticket = mina()
    first = scan(ticket.secret, door="door 1")
    assert (first.colour, first.sentence) == ("green", "Welcome, Mina Patel")
    assert (first.registration, first.ticket) == (ticket.registration.code, ticket.number)
    check_in = CheckIn.objects.get()
    assert (check_in.ticket, check_in.door, check_in.by) == (ticket, "door 1", "anna")

    again = scan(ticket.secret, door="door 2")
    assert again.colour == "amber"
    assert again.sentence == f"Already checked in at {check_in.at:%H:%M} (door 1)"
    assert CheckIn.objects.count() == 1
    assert Scan.objects.count() == 2


@pytest.mark.fast
def test_a_scan_sent_again_with_its_id_gets_its_first_answer_and_writes_nothing():
    ticket = mina()
    first = scan(ticket.secret, scan_id="phone-1:0001")
    again = scan(ticket.secret, scan_id="phone-1:0001", door="door 2")
    assert (again.colour, again.sentence, again.repeated) == ("green", first.sentence, True)
    assert Scan.objects.count() == 1
    assert CheckIn.objects.count() == 1


@pytest.mark.fast
@pytest.mark.parametrize(
    "code, detail",
    [
        ("A" * 43, "matches none"),  # a ticket's shape, forged
        (None, "empty"),
        ("", "empty"),
        ("https://example.org/a-ticket", "not a Nightjar ticket"),
        ("x" * 100_000, "100000 characters long"),
        ("T-9999", "no ticket T-9999"),
        ("R-9999", "no registration R-9999"),
    ],
)
def test_a_code_that_is_not_ours_is_red_with_a_sentence_and_writes_only_the_scan(code, detail):
    mina()
    answer = scan(code, typed=isinstance(code, str) and code[:2] in ("T-", "R-"))
    assert (answer.colour, answer.sentence) == ("red", "Not a ticket for this evening")
    assert detail in answer.detail
    assert CheckIn.objects.count() == 0
    assert Scan.objects.get().colour == "red"


@pytest.mark.fast
def test_a_truncated_or_altered_secret_is_red():
    ticket = mina()
    truncated = scan(ticket.secret[:30])
    altered = scan(ticket.secret[:-1] + ("A" if ticket.secret[-1] != "A" else "B"))
    assert "truncated or altered" in truncated.detail
    assert "matches none" in altered.detail
    assert (truncated.colour, altered.colour) == ("red", "red")
    assert CheckIn.objects.count() == 0


@pytest.mark.fast
def test_a_typed_ticket_number_checks_in_like_its_qr_code():
    ticket = mina()
    assert scan(ticket.number, typed=True).colour == "green"
    assert scan(ticket.secret).colour == "amber"


@pytest.mark.fast
def test_a_scanned_code_that_reads_like_a_ticket_number_is_not_taken_for_one():
    ticket = mina()
    for foreign in (str(ticket.pk), ticket.number, ticket.registration.code):  # a product's barcode, a sticker
        answer = scan(foreign)
        assert (answer.colour, answer.detail) == ("red", "This QR code is not a Nightjar ticket.")
    assert CheckIn.objects.count() == 0


@pytest.mark.fast
def test_a_ticket_that_repair_removed_answers_replaced_by_the_kept_one():
    ticket = mina()
    Ticket.objects.issue(registration_id=ticket.registration_id, name=ticket.name)  # the unsafe handler's duplicate
    duplicate = ticket.registration.tickets_in_order().last()
    both = scan(duplicate.secret)
    assert both.colour == "red" and "has 2 tickets" in both.detail  # nobody gets in until staff repair it

    repair_registration(code=ticket.registration.code, actor="desk")
    removed = scan(duplicate.secret)
    assert (removed.colour, removed.sentence) == ("red", f"Replaced by {ticket.number}")
    assert scan(duplicate.number, typed=True).sentence == f"Replaced by {ticket.number}"
    assert CheckIn.objects.count() == 0
    assert scan(ticket.secret).colour == "green"


@pytest.mark.fast
def test_a_registration_without_a_ticket_is_red():
    registration = Registration.objects.create(name="Noor Haddad")
    answer = scan(registration.code, typed=True)
    assert answer.colour == "red" and "has no ticket yet" in answer.detail


@pytest.mark.fast
def test_undo_needs_a_reason_goes_on_the_history_and_the_ticket_is_valid_again():
    ticket = mina()
    scan(ticket.secret)
    with pytest.raises(services.DoorError, match="Say why"):
        services.undo_check_in(ticket=ticket.number, actor="desk", reason=" ")
    services.undo_check_in(ticket=ticket.number, actor="desk", reason="scanned the wrong guest")
    assert CheckIn.objects.count() == 0
    action = StaffAction.objects.get(action="undo check-in")
    assert action.registration == ticket.registration and "scanned the wrong guest" in action.detail
    assert scan(ticket.secret).colour == "green"
    with pytest.raises(services.DoorError, match="not checked in"):
        services.undo_check_in(ticket="T-9999", actor="desk", reason="typo")


@pytest.mark.fast
def test_an_offline_door_that_admitted_a_guest_already_in_is_a_conflict():
    ticket = mina()
    scan(ticket.secret, door="door 1", offline=True, admitted=True)
    late = scan(ticket.secret, door="door 2", offline=True, admitted=True)
    assert (late.colour, late.conflict) == ("amber", True)
    assert [s.door for s in services.arrivals().conflicts] == ["door 2"]
    assert CheckIn.objects.count() == 1


@pytest.mark.fast
def test_the_offline_list_holds_digests_never_secrets():
    ticket = mina()
    listed = services.valid_digests()
    assert listed["valid"] == [services.digest(ticket.secret)]
    assert ticket.secret not in str(listed)
    assert listed["numbers"] == {ticket.number: "valid", ticket.registration.code: "valid"}
    scan(ticket.secret)
    assert services.valid_digests() == {
        "valid": [],
        "checked_in": [services.digest(ticket.secret)],
        "numbers": {ticket.number: "checked_in", ticket.registration.code: "checked_in"},
    }


@pytest.mark.fast
def test_a_scan_the_offline_door_turned_away_is_recorded_but_never_checked_in():
    ticket = mina()
    answer = services.scan_ticket(
        code=None, code_sha256=services.digest(ticket.secret), scan_id="off-1", actor="door", door="d", offline=True
    )
    assert (answer.colour, answer.sentence) == ("red", "Not admitted (offline)")
    assert not CheckIn.objects.exists()
    admitted = services.scan_ticket(
        code=None,
        code_sha256=services.digest(ticket.secret),
        scan_id="off-2",
        actor="door",
        door="d",
        offline=True,
        admitted=True,
    )
    assert admitted.colour == "green" and CheckIn.objects.get().ticket == ticket
    # The same scan sent again, once with its code (online) and once with its digest (queued), is one scan.
    online = services.scan_ticket(code=ticket.secret, scan_id="off-2", actor="door", door="d")
    assert online.repeated is True


@pytest.mark.fast
def test_a_typed_number_offline_is_judged_as_the_server_judges_it():
    ticket = mina()
    numbers = services.valid_digests()["numbers"]
    # (the ticket's own numbers, whatever the database's sequences are at: PostgreSQL's are not reset per test)
    for typed in (ticket.number, ticket.registration.code, "T-999999", "R-999998"):
        server = services.judge(typed, typed=True)
        offline = numbers.get(typed) == "valid"
        assert (server.colour == "green") == offline, typed
    assert numbers[ticket.number] == "valid"


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_two_doors_scanning_one_ticket_at_once_make_one_check_in_and_one_amber():
    """Real threads, each with its own connection to the real database
    (bin/test runs this on SQLite and on PostgreSQL)."""
    ticket = mina()
    doors = 4
    start = threading.Barrier(doors)
    answers, errors = [], []

    def door(n: int) -> None:
        try:
            start.wait()
            answers.append(scan(ticket.secret, door=f"door {n}").colour)
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=door, args=(n,)) for n in range(doors)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(answers) == ["amber"] * (doors - 1) + ["green"]
    assert CheckIn.objects.count() == 1
    assert Scan.objects.count() == doors


@pytest.mark.fast
def test_arrivals_count_who_is_in_and_who_is_not():
    ticket = mina()
    other = Registration.objects.create(name="Noor Haddad")
    Ticket.objects.issue(registration_id=other.pk, name=other.name)
    scan(ticket.secret)
    seen = services.arrivals()
    assert (seen.checked_in, seen.expected) == (1, 2)
    assert [t.name for t in seen.not_arrived] == ["Noor Haddad"]
    assert sum(count for _, count in seen.per_minute) == 1


@pytest.mark.fast
def test_the_undo_command_calls_the_same_service_and_fails_with_a_sentence():
    ticket = mina()
    scan(ticket.secret)
    out = io.StringIO()
    call_command("undo_check_in", ticket.number, "--reason", "let in by mistake", stdout=out)
    assert f"Undid the check-in of {ticket.number}" in out.getvalue()
    assert "(manage.py undo_check_in)" in StaffAction.objects.get(action="undo check-in").actor
    with pytest.raises(CommandError, match="is not checked in") as refused:
        call_command("undo_check_in", ticket.number, "--reason", "again")
    assert refused.value.returncode == 1


def wait_until(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"Not seen within {seconds} s: {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def database_held():
    """A second session holding what the scan must write: SQLite's write lock,
    or on PostgreSQL the check-in table (so the request waits inside its
    transaction, its scan row written but not committed)."""
    if connection.vendor == "sqlite":
        held = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        held.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        held = psycopg.connect(database_url().replace("postgres://", "postgresql://"))
        held.execute("LOCK TABLE door_checkin IN ACCESS EXCLUSIVE MODE")
    try:
        yield
    finally:
        held.rollback()
        held.close()


def request_is_waiting(worker_pid: int) -> bool:
    if connection.vendor == "sqlite":  # the web process opens the database for the request only
        folder = Path(f"/proc/{worker_pid}/fd")
        try:
            return any(str(link.readlink()) == str(connection.settings_dict["NAME"]) for link in folder.iterdir())
        except FileNotFoundError:  # a descriptor closed while we looked
            return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"door_checkin\"%%'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.system
@pytest.mark.postgres
@pytest.mark.transport_free
@pytest.mark.django_db(transaction=True)
def test_a_scan_cut_off_by_a_web_restart_mid_request_is_one_check_in_when_sent_again(worker_env):
    ticket = mina()
    user = User.objects.create_user("door", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="check_in"))
    client = Client()
    client.force_login(user)  # a signed cookie: the web process reads it with the same key
    csrf = "c" * 32
    headers = {
        "Cookie": f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}; csrftoken={csrf}",
        "X-CSRFToken": csrf,
        "Content-Type": "application/json",
    }
    body = json.dumps({"scan_id": "cut-off-1", "code": ticket.secret, "door": "door 1"}).encode()
    services.fill_digests()  # the request's first write is then its own transaction's
    env = {**worker_env, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}  # as the site fixture
    server, url = start_gunicorn(env, "--workers", "1")

    def send() -> dict:
        request = urllib.request.Request(url + "/door/scan.json", data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    try:
        [worker_pid] = map(int, Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split())
        cut_off = []
        assert not request_is_waiting(worker_pid)  # so what it sees below is the scan's request
        with database_held():
            sender = threading.Thread(target=lambda: cut_off.append(catch(send)))
            sender.start()
            wait_until(lambda: request_is_waiting(worker_pid), "the scan request waiting on the database")
            os.kill(worker_pid, signal.SIGKILL)  # the web process dies mid-request; gunicorn starts another
            sender.join()
        assert isinstance(cut_off[0], (urllib.error.URLError, http.client.HTTPException, ConnectionError))
        assert not Scan.objects.filter(scan_id="cut-off-1").exists()

        # The listening socket outlived the worker: this waits for the new one.
        first = send()
        assert (first["colour"], first["repeated"]) == ("green", False)  # nothing of the cut-off request stayed
        assert send()["repeated"] is True  # and again: its first answer, nothing written
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert CheckIn.objects.count() == 1
    assert Scan.objects.filter(scan_id="cut-off-1").count() == 1


def catch(call):
    try:
        return call()
    except Exception as error:  # noqa: BLE001 (the caller looks at what it was)
        return error


@pytest.mark.fast
def test_an_offline_door_judges_a_cancelled_registration_s_ticket_red_as_the_server_does():
    from tickets.models import Seat

    ticket = mina()
    Registration.objects.filter(pk=ticket.registration_id).update(seat=Seat.CANCELLED)
    listed = services.valid_digests()
    assert services.digest(ticket.secret) not in listed["valid"] + listed["checked_in"]
    assert ticket.number not in listed["numbers"] and ticket.registration.code not in listed["numbers"]
    assert services.judge(ticket.secret).sentence == "Cancelled"
