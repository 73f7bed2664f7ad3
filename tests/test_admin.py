"""The staff desk: lists, filters, actions and the delivery status page,
through the test client as a staff user."""

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nightjar_delivery import transport
from tickets.models import Completion, Registration, RejectedMessage, StaffAction, Ticket
from tickets.services.registrations import register_guest

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/tickets/registration/"


def with_tickets(name: str, count: int) -> Registration:
    registration = Registration.objects.create(name=name)
    if count:
        Completion.objects.create(registration=registration)
    for _ in range(count):
        Ticket.objects.create(registration=registration, name=name)
    return registration


@pytest.mark.fast
def test_the_admin_refuses_anyone_who_is_not_staff(client):
    assert client.get(CHANGELIST).status_code == 302  # to the login page
    User.objects.create_user("guest", password="pw-for-a-guest-1")
    client.login(username="guest", password="pw-for-a-guest-1")
    assert client.get(CHANGELIST).status_code == 302
    assert client.get(f"{CHANGELIST}delivery-status/").status_code == 302


@pytest.mark.fast
def test_the_list_shows_state_and_ticket_count_and_filters_by_state(staff):
    pending = with_tickets("Pending Person", 0)
    issued = with_tickets("Issued Person", 1)
    doubled = with_tickets("Doubled Person", 2)
    page = staff.get(CHANGELIST).content.decode()
    for registration, state in ((pending, "pending"), (issued, "ticket issued"), (doubled, "duplicate tickets")):
        assert registration.code in page and state in page
    duplicates = staff.get(CHANGELIST, {"state": "duplicates"}).content.decode()
    assert doubled.name in duplicates and issued.name not in duplicates
    pending_page = staff.get(CHANGELIST, {"state": "pending"}).content.decode()
    assert pending.name in pending_page and issued.name not in pending_page


@pytest.mark.fast
def test_each_state_filter_lists_the_registrations_status_shows_in_that_state(staff):
    """The filters use the design's states: a ticket without its key is not
    "ticket issued", a key without its ticket is not "pending"."""
    issued = with_tickets("Issued Person", 1)
    without_key = Registration.objects.create(name="Ticket Only Person")
    Ticket.objects.create(registration=without_key, name=without_key.name)
    key_only = Registration.objects.create(name="Key Only Person")
    Completion.objects.create(registration=key_only)
    waiting = with_tickets("Waiting Person", 0)
    everyone = [issued, without_key, key_only, waiting]
    for state, expected in (
        ("issued", issued),
        ("without_key", without_key),
        ("key_only", key_only),
        ("pending", waiting),
    ):
        page = staff.get(CHANGELIST, {"state": state}).content.decode()
        assert [r.name for r in everyone if r.name in page] == [expected.name], state


@pytest.mark.fast
def test_search_finds_by_code_and_by_name(staff):
    ada = with_tickets("Ada Lovelace", 1)
    with_tickets("Grace Hopper", 1)
    by_code = staff.get(CHANGELIST, {"q": ada.code}).content.decode()
    assert "Ada Lovelace" in by_code and "Grace Hopper" not in by_code
    by_name = staff.get(CHANGELIST, {"q": "hopper"}).content.decode()
    assert "Grace Hopper" in by_name and "Ada Lovelace" not in by_name


@pytest.mark.fast
@pytest.mark.parametrize(
    "path", ["/admin/tickets/registration/", "/admin/tickets/ticket/", "/admin/tickets/rejectedmessage/"]
)
def test_a_search_of_thousands_of_words_asks_the_database_a_few_of_them(staff, path):
    """Django makes one LIKE clause per word of the search box: a 4 KB search of
    2,000 words made a query of 2,000 clauses scanning every row 2,000 times."""
    register_guest(name="Ada Lovelace")
    with CaptureQueriesContext(connection) as queries:
        response = staff.get(path, {"q": " ".join(["ada"] * 2000)})
    assert response.status_code == 200
    assert max(query["sql"].upper().count("LIKE") for query in queries.captured_queries) <= 8
    assert "Searched for the first 8 words within 200 characters only." in response.content.decode()
    if path == "/admin/tickets/registration/":
        assert "Ada Lovelace" in response.content.decode()  # the bounded search still finds


@pytest.mark.fast
def test_the_list_makes_the_same_few_queries_for_10_or_300_rows(staff):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert staff.get(CHANGELIST).status_code == 200
        return len(captured)

    for n in range(10):
        with_tickets(f"Guest {n}", n % 3)
    few = queries()
    for n in range(290):
        with_tickets(f"More {n}", n % 3)
    assert queries() == few <= 12


@pytest.mark.fast
def test_the_detail_page_shows_tickets_key_and_rejected_messages(staff):
    registration = with_tickets("Detailed Guest", 2)
    RejectedMessage.objects.create(
        reason="The name does not match",
        body_excerpt="{...}",
        body_sha256="x" * 64,
        body_size=5,
        registration=registration,
    )
    page = staff.get(f"{CHANGELIST}{registration.pk}/change/").content.decode()
    for ticket in registration.tickets.all():
        assert ticket.number in page
    assert "completion key" in page.lower()
    assert "The name does not match" in page


@pytest.mark.broker
def test_retry_delivery_action_publishes_and_logs(staff, workers):
    registration = with_tickets("Retry Me", 0)
    response = staff.post(CHANGELIST, {"action": "retry_delivery", "_selected_action": [registration.pk]}, follow=True)
    assert f"Published a new delivery of {registration.code}" in response.content.decode()
    trace = StaffAction.objects.get(registration=registration)
    assert (trace.actor, trace.action) == ("desk (admin)", "retry")
    assert f"Received {registration.code}" in workers.run().stdout
    assert registration.tickets.count() == 1


@pytest.mark.fast
def test_repair_action_shows_the_plan_first_and_applies_on_confirmation(staff):
    registration = with_tickets("Twice", 3)
    keep = registration.tickets.order_by("id").first()
    plan = staff.post(CHANGELIST, {"action": "repair_duplicate_tickets", "_selected_action": [registration.pk]})
    assert "Apply the repair" in plan.content.decode()
    assert f"keep the earliest ticket {keep.number}" in plan.content.decode()
    assert registration.tickets.count() == 3  # nothing changed yet

    applied = staff.post(
        CHANGELIST,
        {"action": "repair_duplicate_tickets", "_selected_action": [registration.pk], "confirm": "apply"},
        follow=True,
    )
    assert f"{registration.code}: kept {keep.number}" in applied.content.decode()
    assert list(registration.tickets.all()) == [keep]
    trace = StaffAction.objects.get(registration=registration, action="repair")
    assert trace.actor == "desk (admin)" and f"kept {keep.number}" in trace.detail
    assert "desk (admin)" in staff.get(f"{CHANGELIST}{registration.pk}/change/").content.decode()


@pytest.mark.fast
def test_repair_action_reports_refusals(staff):
    registration = with_tickets("No Ticket Yet", 0)
    page = staff.post(CHANGELIST, {"action": "repair_duplicate_tickets", "_selected_action": [registration.pk]})
    assert "has no ticket yet" in page.content.decode()


@pytest.mark.broker
def test_delivery_status_page_counts_rows_and_the_queue(staff):
    register_guest(name="Waiting Guest")
    with_tickets("Doubled", 2)
    page = staff.get(f"{CHANGELIST}delivery-status/").content.decode()
    assert "Delivery status" in page
    assert '<span class="desk-number">1</span> duplicates' in page
    assert '<span class="desk-number">1</span> pending' in page
    assert '<th scope="row">Ready</th><td>1</td>' in page
    assert '<th scope="row">Unacknowledged</th><td>0</td>' in page
    assert "Oldest pending registration" in page
    if transport.kind() == "redis_streams":  # who holds what, and the stream kept for history
        assert '<th scope="row">Unacknowledged per consumer</th><td>none</td>' in page
        assert '<th scope="row">Stream length</th><td>1 entries' in page


@pytest.mark.broker_service
@pytest.mark.broker
def test_delivery_status_page_says_when_rabbitmq_is_unreachable(staff, rabbit):
    with rabbit.down():
        page = staff.get(f"{CHANGELIST}delivery-status/")
    assert page.status_code == 200
    assert f"{transport.name()} is unreachable" in page.content.decode()


@pytest.mark.fast
def test_rejected_messages_and_completions_are_read_only(staff):
    registration = with_tickets("Read Only", 1)
    RejectedMessage.objects.create(reason="bad", body_sha256="y" * 64, body_size=3)
    assert staff.get("/admin/tickets/rejectedmessage/add/").status_code == 403
    assert staff.get("/admin/tickets/completion/add/").status_code == 403
    assert staff.get(f"/admin/tickets/completion/{registration.pk}/delete/").status_code == 403


@pytest.mark.broker
def test_a_view_only_user_cannot_run_the_actions(client, workers):
    viewer = User.objects.create_user("viewer", password="pw-for-a-viewer-1", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_registration"))
    client.force_login(viewer)
    registration = with_tickets("Twice Viewed", 2)
    page = client.get(CHANGELIST).content.decode()
    assert "Retry delivery" not in page and "Repair duplicate tickets" not in page
    for action in ("retry_delivery", "repair_duplicate_tickets"):
        response = client.post(
            CHANGELIST, {"action": action, "_selected_action": [registration.pk], "confirm": "apply"}, follow=True
        )
        assert response.status_code == 200  # the list again: the action is not there for this user
    assert registration.tickets.count() == 2
    assert not StaffAction.objects.exists()
    assert workers.run().stdout.strip() == "No ready registrations"  # nothing was published


@pytest.mark.fast
def test_staff_cannot_delete_a_ticket_in_the_admin(staff):
    registration = with_tickets("Keep My Ticket", 1)
    ticket = registration.tickets.get()
    response = staff.post(f"/admin/tickets/ticket/{ticket.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    listing = staff.post("/admin/tickets/ticket/", {"action": "delete_selected", "_selected_action": [ticket.pk]})
    assert Ticket.objects.filter(pk=ticket.pk).exists(), listing.status_code
