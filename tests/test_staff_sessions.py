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


def sign_in(address: str, password: str, username: str = "door-1"):
    return Client(REMOTE_ADDR=address).post(LOGIN, {"username": username, "password": password, "next": "/admin/"})


def test_a_hundred_wrong_passwords_are_limited_and_another_address_still_signs_in(volunteer, settings):
    settings.NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE = 10
    statuses = [sign_in("198.51.100.9", f"guess {n}").status_code for n in range(100)]
    assert statuses[:10] == [200] * 10  # the form again, with its error
    assert set(statuses[10:]) == {429}
    refused = sign_in("198.51.100.9", PASSWORD)  # the right password, from the guessing address: still refused
    assert refused.status_code == 429 and refused["Retry-After"] == "60"
    assert "Too many failed sign-ins from this address; wait a minute" in refused.content.decode()
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302  # the volunteer, elsewhere: signed in


def test_guesses_at_one_username_from_many_addresses_are_limited_per_username(volunteer, settings):
    settings.NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE = 5
    for n in range(5):
        assert sign_in(f"198.51.100.{n}", "guess").status_code == 200
    assert sign_in("198.51.100.1", "guess").status_code == 429  # failed before, the username over its limit
    assert "Too many failed sign-ins for this username" in sign_in("198.51.100.2", PASSWORD).content.decode()
    assert sign_in("198.51.100.50", "guess").status_code == 200  # one more address: its own first try
    assert sign_in("203.0.113.5", PASSWORD).status_code == 302  # never blocked by the others' failures
