"""The door's pages and JSON endpoints through the test client: who may,
CSRF, idempotency by scan id, the rate limit, the offline sync, the guest's
"Checked in at", and no secret in the logs."""

import json
import logging
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from door.models import CheckIn, Scan
from nightjar.logs import MaskSecrets
from tickets.models import Registration, Ticket
from tickets.services.demo import seed_demo

pytestmark = pytest.mark.django_db


def mina() -> Ticket:
    registration, _ = seed_demo()
    return registration.tickets_in_order().get()


def staff_with(*codenames: str, csrf: bool = False) -> Client:
    user = User.objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="door", codename__in=codenames))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def post_scan(client, code, scan_id=None, **extra):
    body = {"scan_id": uuid.uuid4().hex if scan_id is None else scan_id, "code": code, "door": "door 1", **extra}
    return client.post(reverse("door-scan"), json.dumps(body), content_type="application/json")


@pytest.mark.fast
def test_staff_with_the_check_in_permission_scan_and_a_repeat_is_amber():
    ticket = mina()
    door = staff_with("check_in")
    assert door.get(reverse("door")).status_code == 200
    first = post_scan(door, ticket.secret, scan_id="s1").json()
    assert (first["colour"], first["sentence"], first["ticket"]) == ("green", "Welcome, Mina Patel", ticket.number)
    assert post_scan(door, ticket.secret, scan_id="s1").json()["repeated"] is True
    assert post_scan(door, ticket.secret).json()["colour"] == "amber"
    assert CheckIn.objects.count() == 1


@pytest.mark.fast
def test_view_only_staff_see_arrivals_but_cannot_check_in():
    ticket = mina()
    viewer = staff_with("view_checkin")
    assert viewer.get(reverse("door")).status_code == 403
    assert post_scan(viewer, ticket.secret).status_code == 403
    assert viewer.get(reverse("door-tickets")).status_code == 403
    page = viewer.get(reverse("door-arrivals"))
    assert page.status_code == 200 and "Checked in 0 of 1" in page.content.decode()
    assert "Undo a check-in" not in page.content.decode()
    assert Scan.objects.count() == 0
    assert Client().get(reverse("door")).status_code == 302  # anonymous: to the admin's login
    assert post_scan(Client(), ticket.secret).status_code == 401


@pytest.mark.fast
def test_the_endpoint_refuses_a_post_without_the_csrf_token():
    ticket = mina()
    door = staff_with("check_in", csrf=True)
    assert post_scan(door, ticket.secret).status_code == 403
    assert Scan.objects.count() == 0


@pytest.mark.fast
def test_the_endpoint_is_rate_limited_per_staff_user(settings, monkeypatch):
    monkeypatch.setattr(
        "nightjar.ratelimit.this_minute", lambda: 29_000_000
    )  # a run that crossed a minute would start over
    settings.NIGHTJAR_DOOR_SCANS_PER_MINUTE = 2
    cache.clear()  # earlier tests' scans were counted too
    ticket = mina()
    one, other = staff_with("check_in"), staff_with("check_in")
    assert [post_scan(one, "T-9999").status_code for _ in range(3)] == [200, 200, 429]
    assert post_scan(other, ticket.secret).status_code == 200


@pytest.mark.fast
def test_bad_bodies_get_a_400_with_a_sentence():
    door = staff_with("check_in")
    junk = door.post(reverse("door-scan"), b"\xff" * 10, content_type="application/json")
    no_id = post_scan(door, "T-0001", scan_id="")
    assert (junk.status_code, no_id.status_code) == (400, 400)
    assert "scan needs its own id" in no_id.json()["error"]
    assert Scan.objects.count() == 0
    for when in ("2026-12-02T19:02:00", "2026-13-45T99:00:00Z", "yesterday", 12):  # naive, impossible, junk
        assert post_scan(door, "T-9999", scanned_at=when).status_code == 200


@pytest.mark.fast
def test_an_offline_sync_sent_twice_makes_one_check_in_and_the_conflict_shows_on_the_desk():
    ticket = mina()
    door_1, door_2 = staff_with("check_in", "view_checkin"), staff_with("check_in")
    listed = door_1.get(reverse("door-tickets")).json()
    assert ticket.secret not in json.dumps(listed) and len(listed["valid"]) == 1
    scans = [{"scan_id": "d1-1", "code": ticket.secret, "door": "door 1", "offline": True, "admitted": True}]
    body = json.dumps({"scans": scans})
    for _ in range(2):  # the first response was lost; the phone sends it again
        answers = door_1.post(reverse("door-sync"), body, content_type="application/json").json()["answers"]
        assert answers[0]["colour"] == "green"
    late = [{"scan_id": "d2-1", "code": ticket.secret, "door": "door 2", "offline": True, "admitted": True}]
    answer = door_2.post(reverse("door-sync"), json.dumps({"scans": late}), content_type="application/json")
    assert answer.json()["answers"][0]["conflict"] is True
    assert CheckIn.objects.count() == 1 and Scan.objects.count() == 2
    desk = door_1.get(reverse("door-arrivals")).content.decode()
    assert "let in offline at door 2" in desk


@pytest.mark.fast
def test_undo_on_the_arrivals_page_needs_the_change_permission_and_a_reason():
    ticket = mina()
    post_scan(staff_with("check_in"), ticket.secret)
    viewer = staff_with("view_checkin")
    assert viewer.post(reverse("door-arrivals"), {"ticket": ticket.number, "reason": "x"}).status_code == 403
    desk = staff_with("view_checkin", "change_checkin")
    desk.post(reverse("door-arrivals"), {"ticket": ticket.number, "reason": ""})
    assert CheckIn.objects.count() == 1
    desk.post(reverse("door-arrivals"), {"ticket": ticket.number, "reason": "wrong guest"})
    assert CheckIn.objects.count() == 0


@pytest.mark.fast
def test_the_guest_ticket_page_says_when_they_checked_in(client):
    ticket = mina()
    registration = ticket.registration
    url = reverse("ticket", args=[registration.code, registration.secret])
    assert "Checked in at" not in client.get(url).content.decode()
    post_scan(staff_with("check_in"), ticket.secret)
    check_in = CheckIn.objects.get()
    assert f"Checked in at {check_in.at:%H:%M}" in client.get(url).content.decode()


@pytest.mark.fast
def test_a_scanned_secret_never_reaches_the_log(caplog):
    ticket = mina()
    door = staff_with("check_in")
    caplog.handler.addFilter(MaskSecrets())
    with caplog.at_level(logging.DEBUG):
        post_scan(door, ticket.secret)
        door.get(reverse("door-scan") + "?code=" + ticket.secret)  # a 405, logged as a warning with its path
        logging.getLogger("door").warning("scanned %s", ticket.secret)
    assert caplog.records
    assert ticket.secret not in caplog.text


@pytest.mark.fast
def test_a_negative_scan_limit_is_a_system_check_error(settings):
    from door.checks import door_settings

    assert door_settings(None) == []
    settings.NIGHTJAR_DOOR_SCANS_PER_MINUTE = -1
    assert [error.id for error in door_settings(None)] == ["door.E001"]


def desk_for(*door_codenames: str) -> Client:
    """Staff who may view registrations (the desk), and the door permissions given."""
    client = staff_with(*door_codenames)
    user = User.objects.get(pk=client.session["_auth_user_id"])
    user.user_permissions.add(Permission.objects.get(content_type__app_label="tickets", codename="view_registration"))
    return client


@pytest.mark.fast
def test_the_desk_counts_a_guest_checked_in_at_the_door_as_arrived():
    ticket = mina()
    noor = Registration.objects.create(name="Noor Haddad")
    guest = Ticket.objects.create(registration=noor, name=noor.name)
    desk = reverse("admin:tickets_delivery_status") + "?fragment=1"
    before = desk_for("view_checkin").get(desk).content.decode()
    assert "<h2>Arrivals</h2>" in before and ">0</span> of 2 checked in" in before
    assert post_scan(staff_with("check_in"), ticket.secret).json()["colour"] == "green"
    after = desk_for("view_checkin").get(desk).content.decode()
    assert ">1</span> of 2 checked in" in after
    assert f"Not arrived yet: {guest.name} ({guest.number})." in after
    assert "Last hour: arrivals at the door per minute" in after and "1 check-ins in the last hour" in after
    # Staff without the door's view permission see the desk without its arrivals.
    assert "<h2>Arrivals</h2>" not in desk_for().get(desk).content.decode()


def sync(client, scans):
    return client.post(reverse("door-sync"), json.dumps({"scans": scans}), content_type="application/json")


HOSTILE_SCANS = [
    {"scan_id": "h-surrogate", "code": "T-9999", "door": "door \ud800 one"},
    {"scan_id": "h-nul", "code": "T-9999", "door": "door\x00two"},
    {"scan_id": "h-nested", "code": {"a": [[[[[[[[[[[]]]]]]]]]]]}, "door": "door 3"},
    {"scan_id": "h-list-door", "code": "\ud800\x00", "door": ["not", "text"]},
    "not a scan",
    {"scan_id": {"no": "id"}, "code": "T-9999"},
]


@pytest.mark.fast
@pytest.mark.postgres
def test_hostile_scans_in_a_sync_get_their_own_answers_and_the_others_check_in():
    ticket = mina()
    door = staff_with("check_in")
    good = {"scan_id": "good-1", "code": ticket.secret, "door": "door 1"}
    response = sync(door, [*HOSTILE_SCANS, good])
    assert response.status_code == 200
    answers = response.json()["answers"]
    assert len(answers) == len(HOSTILE_SCANS) + 1
    assert [a.get("colour") for a in answers[:4]] == ["red"] * 4
    assert "error" in answers[4] and "error" in answers[5]
    assert answers[-1]["colour"] == "green" and CheckIn.objects.get().ticket == ticket
    assert Scan.objects.get(scan_id="h-nul").door == "door\\x00two"


@pytest.mark.fast
def test_a_body_nested_past_the_parser_s_depth_is_a_400_with_a_sentence():
    door = staff_with("check_in")
    deep = b'{"scans": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = door.post(reverse("door-sync"), deep, content_type="application/json")
    assert response.status_code == 400 and "JSON" in response.json()["error"]


@pytest.mark.fast
def test_every_door_refusal_is_json_with_a_sentence():
    ticket = mina()
    door = staff_with("check_in")
    too_big = door.post(
        reverse("door-sync"), b'{"scans": [' + b" " * (1024 * 1024) + b"]}", content_type="application/json"
    )
    assert too_big.status_code == 400 and "over 64 KB" in too_big.json()["error"]
    wrong_method = door.get(reverse("door-scan"))
    assert wrong_method.status_code == 405 and "POST" in wrong_method.json()["error"]
    stale = staff_with("check_in", csrf=True)
    refused = post_scan(stale, ticket.secret)
    assert refused.status_code == 403 and refused.json()["signed_out"] is True and "reload" in refused.json()["error"]
    viewer = staff_with("view_checkin")
    assert "permission" in post_scan(viewer, ticket.secret).json()["error"]
    assert "Sign in" in post_scan(Client(), ticket.secret).json()["error"]
    assert not CheckIn.objects.exists()


@pytest.mark.fast
def test_a_reused_scan_id_with_another_code_or_user_is_refused_not_answered_with_the_first_verdict():
    ticket = mina()
    other = Ticket.objects.create(
        registration=Registration.objects.create(name="Guest Number 3"), name="Guest Number 3"
    )
    door, colleague = staff_with("check_in"), staff_with("check_in")
    assert post_scan(door, ticket.secret, scan_id="same").json()["colour"] == "green"
    reused = post_scan(door, other.secret, scan_id="same")
    assert reused.status_code == 400 and "already used for another scan" in reused.json()["error"]
    assert "another staff user" in post_scan(colleague, ticket.secret, scan_id="same").json()["error"]
    assert post_scan(door, ticket.secret, scan_id="same").json()["repeated"] is True  # the same scan again
    answers = sync(door, [{"scan_id": "twice", "code": ticket.secret}, {"scan_id": "twice", "code": other.secret}])
    first, second = answers.json()["answers"]
    assert first["colour"] == "amber" and "already used for another scan" in second["error"]
    assert not CheckIn.objects.filter(ticket=other).exists()


@pytest.mark.fast
def test_a_check_in_only_user_sees_no_arrivals_link_and_a_refusal_leads_back():
    door = staff_with("check_in")
    page = door.get(reverse("door")).content.decode()
    assert reverse("door-arrivals") not in page
    refused = door.get(reverse("door-arrivals"))
    assert refused.status_code == 403
    assert "text/html" in refused["Content-Type"] and 'href="/door/"' in refused.content.decode()
    both = staff_with("check_in", "view_checkin")
    assert reverse("door-arrivals") in both.get(reverse("door")).content.decode()


@pytest.mark.fast
def test_a_phones_queue_key_stays_the_same_across_django_versions(settings):
    """The phone files its offline scans under this key: a key that changed
    with an upgrade (Django 2028 makes salted_hmac's default sha256) would
    leave the scans a phone queued before it under a name no page reads."""
    import hashlib
    import hmac
    import warnings

    from door.services import door_user_key

    settings.SECRET_KEY = "a-fixed-secret-for-this-test-0123456789-abcdefghijklmnop"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Django 6.x warns when the algorithm is left to its default
        key = door_user_key(42)
    salt = hashlib.sha1(("nightjar.door.queue" + settings.SECRET_KEY).encode()).digest()
    assert key == hmac.new(salt, b"42", hashlib.sha1).hexdigest()[:16]


def offline_scan(ticket, scan_id: str, *, admitted: bool, at: str, door: str = "North") -> dict:
    """A scan as the phone queues it offline: the code's digest, never the secret."""
    from door.models import digest

    return {
        "scan_id": scan_id,
        "code_sha256": digest(ticket.secret),
        "door": door,
        "scanned_at": at,
        "offline": True,
        "admitted": admitted,
    }


@pytest.mark.fast
def test_a_second_offline_scan_of_a_ticket_the_phone_let_in_is_amber_at_the_first_scans_time_and_door():
    """The phone admitted T-0001, then showed amber for it ("already checked
    in"): the server said red, "turned T-0001 away; it is not checked in",
    though T-0001 was checked in by the first scan. Answer and record say what is true."""
    from django.utils import timezone

    ticket = mina()
    door = staff_with("check_in")
    let_in = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)  # within the phone's clock slack
    shown = f"Already checked in at {timezone.localtime(let_in):%H:%M} (North)"
    first = offline_scan(ticket, "off-1", admitted=True, at=let_in.isoformat())
    second = offline_scan(ticket, "off-2", admitted=False, at=(let_in + timedelta(minutes=3)).isoformat(), door="South")
    for scans in ([first, second], [second, first]):  # queue order aside: the admitted one counts first
        CheckIn.objects.all().delete()
        Scan.objects.all().delete()
        answers = {answer["scan_id"]: answer for answer in sync(door, scans).json()["answers"]}
        assert answers["off-1"]["colour"] == "green"
        assert (answers["off-2"]["colour"], answers["off-2"]["sentence"]) == ("amber", shown)
        assert answers["off-2"]["ticket"] == ticket.number and answers["off-2"]["conflict"] is False
        recorded = Scan.objects.get(scan_id="off-2")
        assert (recorded.colour, recorded.sentence, recorded.ticket_id) == ("amber", shown, ticket.pk)
        (check_in,) = CheckIn.objects.all()
        assert (check_in.door, check_in.scan.scan_id) == ("North", "off-1")


@pytest.mark.fast
def test_within_the_scan_limit_a_sync_records_the_admitted_guests_first(settings, monkeypatch):
    """205 scans queued offline with the admitted guests at 1, 61, 131, 201 and
    205 went in queue order: at the limit the last three were not checked in a
    minute later. Here: five scans, the admitted at 1, 4 and 5, a limit of 3."""
    monkeypatch.setattr("nightjar.ratelimit.this_minute", lambda: 29_000_000)  # one minute throughout
    settings.NIGHTJAR_DOOR_SCANS_PER_MINUTE = 3
    registrations = Registration.objects.bulk_create([Registration(name=f"Guest {n}") for n in range(5)])
    tickets = Ticket.objects.bulk_create([Ticket(registration=r, name=r.name) for r in registrations])
    admitted = {0, 3, 4}
    scans = [
        offline_scan(t, f"q-{n}", admitted=n in admitted, at="2026-12-04T19:00:00Z") for n, t in enumerate(tickets)
    ]
    answers = sync(staff_with("check_in"), scans).json()["answers"]
    assert [a["scan_id"] for a in answers] == [f"q-{n}" for n in range(5)]  # answered in the order sent
    assert [a.get("colour") for a in answers] == ["green", None, None, "green", "green"]
    assert all(answers[n]["retry"] is True for n in (1, 2))  # the phone sends those next minute
    assert set(CheckIn.objects.values_list("ticket_id", flat=True)) == {tickets[n].pk for n in admitted}
