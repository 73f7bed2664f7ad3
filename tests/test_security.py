"""Security: CSRF, escaping everywhere a name is shown, secrets in guest URLs,
staff-only admin, rate limits, and arbitrary input that never breaks anything."""

import io
import re

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pypdf import PdfReader

from devtools.guest import submission_key
from nightjar_delivery import transport
from nightjar_delivery.worker import Worker
from tickets import contract
from tickets.handler import handle
from tickets.models import Completion, Registration, RejectedMessage, Ticket

pytestmark = pytest.mark.fast

SCRIPT = '<script>alert("x")</script><b>bold</b>'


def form_key(client) -> str:
    return submission_key(client.get("/evening/").content.decode())


@pytest.mark.django_db
def test_the_form_refuses_a_post_without_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    response = client.post("/evening/", {"name": "Forged", "submission_key": "k"})
    assert response.status_code == 403
    assert not Registration.objects.exists()


@pytest.mark.django_db
def test_a_name_with_markup_is_escaped_on_every_page_the_admin_and_the_pdf(client, settings):
    settings.NIGHTJAR_LAB = True
    response = client.post("/evening/", {"name": SCRIPT, "submission_key": form_key(client)})
    registration = Registration.objects.get()
    Completion.objects.create(registration=registration)
    ticket = Ticket.objects.create(registration=registration, name=registration.name)
    base = response["Location"]
    staff = Client()
    staff.force_login(User.objects.create_superuser("sec", "sec@example.org", "pw-sec-123456"))
    pages = [
        client.get(base),
        client.get(base + "ticket/"),
        client.get("/registrations/"),
        staff.get("/admin/tickets/registration/"),
        staff.get(f"/admin/tickets/registration/{registration.pk}/change/"),
        staff.get("/admin/tickets/ticket/"),
    ]
    for page in pages:
        html = page.content.decode()
        assert page.status_code == 200
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(" in html
    text = PdfReader(io.BytesIO(client.get(base + "ticket/download/").content)).pages[0].extract_text()
    assert SCRIPT in text  # drawn as plain text, never interpreted
    assert ticket.name == SCRIPT


@pytest.mark.django_db
def test_guessing_a_registration_id_or_its_secret_gets_404(client):
    registration = Registration.objects.create(name="Hidden")
    assert client.get(f"/registrations/{registration.code}/").status_code == 404
    assert client.get(f"/registrations/{registration.code}/guess/").status_code == 404
    same_length = "A" * len(registration.secret)
    assert client.get(f"/registrations/{registration.code}/{same_length}/").status_code == 404
    assert client.get(f"/registrations/{registration.code}/{same_length}/status.json").status_code == 404
    assert len(registration.secret) >= 43  # 256 random bits


@pytest.mark.django_db
def test_tickets_issued_together_each_get_a_secret_of_their_own():
    """A batch's secrets come from one read of the random source: each is
    still 256 bits in URL-safe base64 (43 characters), and none is shared."""
    guests = [Registration.objects.create(name=f"Guest {n}") for n in range(60)]
    Ticket.objects.issue_many([(guest.pk, guest.name) for guest in guests])
    secrets = list(Ticket.objects.values_list("secret", flat=True))
    assert len(secrets) == 60 and len(set(secrets)) == 60
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", secret) for secret in secrets)
    # The same form as a ticket made one at a time.
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", Ticket.objects.create(registration=guests[0], name="One").secret)


@pytest.mark.django_db
def test_registration_posts_are_rate_limited_per_client_address(client, settings, monkeypatch):
    monkeypatch.setattr(
        "nightjar.ratelimit.this_minute", lambda: 29_000_000
    )  # a run that crossed a minute would start over
    settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE = 3
    for n in range(3):
        assert client.post("/evening/", {"name": f"Guest {n}", "submission_key": f"k{n}"}).status_code == 302
    blocked = client.post("/evening/", {"name": "One Too Many", "submission_key": "k9"})
    assert blocked.status_code == 429
    assert blocked["Retry-After"] == "60"
    assert "Please wait a minute and try again" in blocked.content.decode()
    assert Registration.objects.count() == 3
    other = Client(REMOTE_ADDR="192.0.2.7")
    assert other.post("/evening/", {"name": "Elsewhere", "submission_key": "k10"}).status_code == 302


@pytest.mark.django_db
@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=150))
def test_any_name_posted_to_the_form_is_stored_cleanly_or_refused_never_a_500(client, name):
    before = Registration.objects.count()
    response = client.post("/evening/", {"name": name, "submission_key": ""})
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        stored = Registration.objects.latest("id")
        assert stored.name == contract.clean_name(name)
    else:
        assert Registration.objects.count() == before
        assert 'aria-invalid="true"' in response.content.decode()


class RecordingConsumer:
    """A fake consumer for one function's unit test: records acks only."""

    def __init__(self) -> None:
        self.acked: list[int] = []

    def ack(self, tag: int, *, multiple: bool = False, flush: bool = True) -> None:
        self.acked.append(tag)

    def waiting(self) -> list[bytes]:
        return []  # nothing buffered behind the delivery under test


def valid_bodies():
    return st.builds(
        lambda name: contract.encode(registration_id=1, name=name),
        st.text(min_size=1, max_size=40).filter(lambda n: _valid(n)),
    )


def _valid(name: str) -> bool:
    try:
        return contract.clean_name(name) == name
    except contract.ContractError:
        return False


@pytest.mark.django_db
@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=600), valid_bodies()))
def test_arbitrary_bytes_never_crash_the_worker_and_never_make_a_ticket_unless_valid(monkeypatch, body):
    # The worker drops stale connections before each delivery; here the test's
    # own transaction must survive, so that step is skipped.
    monkeypatch.setattr("nightjar_delivery.worker.report.close_old_connections", lambda: None)
    with transaction.atomic():
        registration = Registration.objects.create(pk=1, name="Known Name")
        worker = Worker(handler=handle, stdout=io.StringIO())
        worker.receiver.consumer = RecordingConsumer()
        worker.process([transport.Delivery(body=body, tag=7, redelivered=False, message_id="")])
        assert worker.receiver.consumer.acked == [7]  # rejected (and recorded) or handled: acked either way
        try:
            message = contract.decode(body)
            valid = message.name == registration.name
        except contract.ContractError:
            valid = False
        assert RejectedMessage.objects.exists() is (not valid)
        assert Ticket.objects.exists() is valid  # the real handler: a ticket only for a valid message
        transaction.set_rollback(True)
