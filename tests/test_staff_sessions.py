"""Staff sign-ins and sessions (issue 52): a limit on failed sign-ins per
address and per username that never blocks a sign-in from elsewhere; expired
session rows swept; the list of signed-in sessions, and ending one."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = [pytest.mark.fast, pytest.mark.django_db]

LOGIN = "/admin/login/"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def volunteer():
    return User.objects.create_user("door-1", password=PASSWORD, is_staff=True)


@pytest.fixture
def one_minute(monkeypatch):
    """The limit's counts in one fixed minute: a run that crossed a minute's
    end would start counting again (the window is the wall clock's minute)."""
    monkeypatch.setattr("nightjar.ratelimit.this_minute", lambda: 29_000_000)


def sign_in(address: str, password: str, username: str = "door-1"):
    return Client(REMOTE_ADDR=address).post(LOGIN, {"username": username, "password": password, "next": "/admin/"})


def test_a_hundred_wrong_passwords_are_limited_and_another_address_still_signs_in(volunteer, settings, one_minute):
    settings.NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE = 10
    statuses = [sign_in("198.51.100.9", f"guess {n}").status_code for n in range(100)]
    assert statuses[:10] == [200] * 10  # the form again, with its error
    assert set(statuses[10:]) == {429}
    refused = sign_in("198.51.100.9", PASSWORD)  # the right password, from the guessing address: still refused
    assert refused.status_code == 429 and refused["Retry-After"] == "60"
    assert "Too many failed sign-ins from this address; wait a minute" in refused.content.decode()
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302  # the volunteer, elsewhere: signed in


def test_guesses_at_one_username_from_many_addresses_are_limited_per_username(volunteer, settings, one_minute):
    settings.NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE = 5
    for n in range(5):
        assert sign_in(f"198.51.100.{n}", "guess").status_code == 200
    assert sign_in("198.51.100.1", "guess").status_code == 429  # failed before, the username over its limit
    assert "Too many failed sign-ins for this username" in sign_in("198.51.100.2", PASSWORD).content.decode()
    assert sign_in("198.51.100.50", "guess").status_code == 200  # one more address: its own first try
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302  # never blocked by the others' failures


def test_expired_session_rows_are_swept_at_sign_in_a_hundred_at_a_time(volunteer, settings):
    """100 sign-ins without signing out left 99 rows, and nothing removed those
    past the cookie's age: each sign-in now forgets up to 100 of them."""
    from datetime import timedelta

    from django.utils import timezone

    from nightjar.models import StaffSession

    expired = timezone.now() - timedelta(seconds=settings.SESSION_COOKIE_AGE, minutes=5)
    for n in range(150):
        StaffSession.objects.create(token=f"old-{n}", user=volunteer, last_seen=expired)
    recent = StaffSession.objects.create(token="recent", user=volunteer, last_seen=timezone.now() - timedelta(days=3))
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302
    assert StaffSession.objects.filter(last_seen__lt=timezone.now() - timedelta(days=10)).count() == 50
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302
    assert not StaffSession.objects.filter(token__startswith="old-").exists()
    assert StaffSession.objects.filter(pk=recent.pk).exists() and StaffSession.objects.count() == 3


def staff_member(name: str, *codenames: str) -> Client:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="nightjar", codename__in=codenames))
    client = Client(REMOTE_ADDR="192.0.2.1")
    client.force_login(user)
    return client


def test_staff_with_the_permission_see_who_is_signed_in_and_end_a_lost_phones_session(volunteer):
    from datetime import timedelta

    from django.utils import timezone

    from nightjar.models import StaffSession
    from tickets.models import StaffAction

    phone = Client(REMOTE_ADDR="203.0.113.5")
    assert phone.post(LOGIN, {"username": "door-1", "password": PASSWORD, "next": "/admin/"}).status_code == 302
    assert phone.get("/admin/").status_code == 200
    (session,) = StaffSession.objects.filter(user=volunteer)
    StaffSession.objects.filter(pk=session.pk).update(last_seen=timezone.now() - timedelta(minutes=5), address="")
    phone.get("/admin/")
    session.refresh_from_db()
    assert session.address == "203.0.113.5" and timezone.now() - session.last_seen < timedelta(minutes=1)

    changelist = "/admin/nightjar/staffsession/"
    viewer = staff_member("viewer", "view_staffsession")
    listed = viewer.get(changelist).content.decode()
    assert "door-1" in listed and "203.0.113.5" in listed
    assert "end_sessions" not in listed  # seeing them is not ending them
    viewer.post(changelist, {"action": "end_sessions", "_selected_action": [session.pk], "confirm": "end_sessions"})
    assert StaffSession.objects.filter(pk=session.pk).exists()

    manager = staff_member("manager", "view_staffsession", "end_staffsession")
    chosen = {"action": "end_sessions", "_selected_action": [session.pk]}
    plan = manager.post(changelist, chosen).content.decode()
    assert "End the session of door-1 (signed in" in plan and "from 203.0.113.5)" in plan
    assert StaffSession.objects.filter(pk=session.pk).exists()  # only the plan so far
    told = manager.post(changelist, {**chosen, "confirm": "end_sessions"}, follow=True).content.decode()
    assert "Ended the session of door-1" in told
    trail = StaffAction.objects.get(action="end session")
    assert trail.actor == "manager (admin)" and trail.detail.startswith("Ended the session of door-1")
    answer = phone.get("/admin/")
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]  # the phone is signed out
    again = manager.post(changelist, {**chosen, "confirm": "end_sessions"}, follow=True).content.decode()
    assert "None of the selected sessions is still signed in; there is nothing to end." in again
