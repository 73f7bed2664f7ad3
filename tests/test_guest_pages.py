"""The guest's path through the site, with a real worker process making the ticket."""

import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import post_save
from django.test.utils import CaptureQueriesContext
from pypdf import PdfReader

from tests.helpers import register_by_form
from tickets.models import Registration, Ticket
from tickets.services.registrations import register_guest

pytestmark = pytest.mark.django_db(transaction=True)


def pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


@pytest.mark.fast
def test_pages_lead_from_home_to_the_form(client):
    home = client.get("/")
    assert "Explore the evening" in home.content.decode()
    assert 'href="/visit/"' in home.content.decode()
    visit = client.get("/visit/")
    assert "Plan your visit" in visit.content.decode()
    evening = client.get("/evening/").content.decode()
    assert "The evening" in evening
    assert '<label for="id_name">Guest name</label>' in evening
    assert "Register for the evening" in evening


@pytest.mark.broker
def test_registration_gets_its_ticket_from_a_worker_process(client, workers):
    response = register_by_form(client, "Ada Lovelace")
    assert response.status_code == 302
    registration = Registration.objects.get()
    page = client.get(response["Location"]).content.decode()
    assert registration.code in page
    assert "Your ticket is being prepared" in page
    assert "Open ticket" not in page

    result = workers.run()
    assert result.returncode == 0, result.stderr
    assert f"Received {registration.code} redelivered=False" in result.stdout
    assert "Handler returned." in result.stdout

    page = client.get(response["Location"]).content.decode()
    assert "Open ticket" in page
    assert "Your ticket is being prepared" not in page
    ticket_page = client.get(f"{response['Location']}ticket/").content.decode()
    assert "Download ticket" in ticket_page and "Back to registration" in ticket_page
    download = client.get(f"{response['Location']}ticket/download/")
    assert download.status_code == 200
    assert download["Content-Type"] == "application/pdf"
    ticket = Ticket.objects.get()
    assert f"nightjar-ticket-{registration.code}-{ticket.number}.pdf" in download["Content-Disposition"]
    text = pdf_text(download.content)
    assert registration.code in text and "Ada Lovelace" in text and ticket.number in text


@pytest.mark.broker
def test_no_ready_registrations_when_the_queue_is_empty(workers):
    result = workers.run()
    assert result.returncode == 0
    assert result.stdout.strip() == "No ready registrations"


@pytest.mark.fast
@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_demo_guest_ticket_opens_and_seeding_twice_changes_nothing(client):
    call_command("seed_demo")
    call_command("seed_demo")
    mina = Registration.objects.get()
    assert (mina.code, mina.name, mina.tickets.count()) == ("R-0001", "Mina Patel", 1)
    base = f"/registrations/{mina.code}/{mina.secret}/"
    assert "Open ticket" in client.get(base).content.decode()
    assert "Mina Patel" in pdf_text(client.get(f"{base}ticket/download/").content)
    # The next guest after the demo data is R-0002.
    assert register_by_form(client, "Next Guest").status_code == 302
    assert Registration.objects.latest("id").code == "R-0002"


@pytest.mark.broker
def test_two_guests_with_the_same_name_get_two_tickets(client, workers):
    register_by_form(client, "Same name")
    register_by_form(client, "Same name")
    assert Registration.objects.filter(name="Same name").count() == 2
    result = workers.run("--drain")
    assert result.returncode == 0, result.stderr
    assert "Drained 2 deliveries" in result.stdout
    assert sorted(Ticket.objects.values_list("registration_id", flat=True)) == sorted(
        Registration.objects.values_list("id", flat=True)
    )


@pytest.mark.fast
def test_your_registrations_lists_this_browser_only_unless_lab_mode(client, settings):
    register_by_form(client, "Mine")
    Registration.objects.create(name="Someone else")
    mine = client.get("/registrations/").content.decode()
    assert "Mine" in mine and "Someone else" not in mine
    settings.NIGHTJAR_LAB = True
    everyone = client.get("/registrations/").content.decode()
    assert "Mine" in everyone and "Someone else" in everyone


@pytest.mark.fast
def test_a_wrong_or_missing_secret_is_a_404(client):
    registration = Registration.objects.create(name="Private Person")
    wrong = "x" * len(registration.secret)
    assert client.get(f"/registrations/{registration.code}/{wrong}/").status_code == 404
    assert client.get(f"/registrations/{registration.code}/").status_code == 404
    assert client.get(f"/registrations/{registration.code}/{wrong}/ticket/download/").status_code == 404
    assert client.get(f"/registrations/R-99999999/{registration.secret}/").status_code == 404
    assert client.get(f"/registrations/{registration.code}/{registration.secret}/").status_code == 200


@pytest.mark.broker
def test_the_status_endpoint_needs_the_secret_and_says_when_the_ticket_is_ready(client, workers):
    registration = register_guest(name="Polling Guest")
    url = f"/registrations/{registration.code}/{registration.secret}/status.json"
    assert client.get(url).json() == {
        "id": registration.code,
        "ready": False,
        "ticket_url": None,
        "state": "pending",
        "place": None,
    }
    assert client.get(url.replace(registration.secret, "x" * len(registration.secret))).status_code == 404
    workers.run()
    assert client.get(url).json()["ticket_url"] == f"/registrations/{registration.code}/{registration.secret}/ticket/"
    page = client.get(f"/registrations/{registration.code}/{registration.secret}/").content.decode()
    assert "registration.js" not in page  # nothing left to wait for


@pytest.mark.fast
def test_a_registration_is_stored_by_one_plain_insert_with_the_row_save_would_write():
    # Every guest's POST stores one: a plain INSERT ... RETURNING, not the
    # ORM's save(), which compiles its INSERT anew on every call (issue 43).
    with CaptureQueriesContext(connection) as through_django:
        registration = register_guest(name="Grace Hopper", submission_key="k" * 32)
    inserts = [query["sql"] for query in through_django.captured_queries if query["sql"].startswith("INSERT")]
    assert not [sql for sql in inserts if Registration._meta.db_table in sql]
    stored = Registration.objects.values().get(pk=registration.pk)
    assert stored == {
        field.attname: getattr(registration, field.attname) for field in Registration._meta.concrete_fields
    }
    assert (stored["name"], stored["seat"], len(stored["secret"])) == ("Grace Hopper", "confirmed", 43)
    # A saved instance: a later save() updates the row it made.
    registration.name = "Grace B. Hopper"
    registration.save()
    assert Registration.objects.get().name == "Grace B. Hopper"
    # The same form sent again returns the first registration (the unique key's IntegrityError).
    assert register_guest(name="Grace B. Hopper", submission_key="k" * 32) == registration


@pytest.mark.fast
def test_a_receiver_of_registrations_save_signals_still_hears_a_guests_registration():
    # The plain INSERT is taken only when no one listens, as the ORM would have told them.
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append((instance.name, created, instance.pk is not None))

    post_save.connect(receiver, sender=Registration, dispatch_uid="test-registration-save")
    try:
        registration = register_guest(name="Katherine Johnson", submission_key="j" * 32)
    finally:
        post_save.disconnect(dispatch_uid="test-registration-save", sender=Registration)
    assert heard == [("Katherine Johnson", True, True)]
    assert Registration.objects.get(pk=registration.pk).name == "Katherine Johnson"
