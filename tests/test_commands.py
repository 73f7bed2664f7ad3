"""status, retry and repair: staff commands over the services layer. None of
them consumes or acks a delivery."""

import json
import signal
import socket

import pytest
from django.core.management import CommandError, call_command

from nightjar_delivery import transport
from tickets.models import Completion, Registration, StaffAction, Ticket
from tickets.services.audit import audit_invariants
from tickets.services.registrations import register_guest

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def with_duplicates(name: str = "Twice Ticketed", extra: int = 2) -> Registration:
    """A registration with 1 + extra tickets, as the unsafe handler would leave it."""
    registration = Registration.objects.create(name=name)
    Completion.objects.create(registration=registration)
    for _ in range(1 + extra):
        Ticket.objects.create(registration=registration, name=name)
    return registration


@pytest.mark.fast
def test_repair_prints_the_plan_and_changes_nothing():
    registration = with_duplicates()
    keep, *extra = registration.tickets.order_by("id")
    output = run("repair", registration.code)
    assert f"keep the earliest ticket {keep.number}" in output
    assert f"delete extra tickets: {extra[0].number}, {extra[1].number}" in output
    assert f"completion key {registration.code}: present" in output
    assert "Nothing changed" in output
    assert registration.tickets.count() == 3


@pytest.mark.fast
def test_repair_apply_keeps_the_earliest_ticket_and_the_key():
    registration = with_duplicates()
    keep = registration.tickets.order_by("id").first()
    Completion.objects.filter(registration=registration).delete()
    output = run("repair", registration.code, "--apply")
    assert "Applied: 2 ticket(s) deleted" in output
    assert list(registration.tickets.all()) == [keep]
    assert Completion.objects.filter(registration=registration).exists()
    assert "delete extra tickets: none" in run("repair", registration.code)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda: "R-0999", "There is no registration R-0999."),
        (lambda: "nonsense", "is not a registration ID like R-0002"),
        (lambda: Registration.objects.create(name="No Ticket").code, "has no ticket yet"),
        (
            lambda: (
                Ticket.objects.create(
                    registration=Registration.objects.create(name="Right Name"), name="Wrong Name"
                ).registration.code
            ),
            "will not guess",
        ),
    ],
    ids=["unknown", "malformed", "no-ticket", "name-mismatch"],
)
def test_repair_apply_refuses_with_a_clear_message(setup, message):
    code = setup()
    tickets_before = Ticket.objects.count()
    with pytest.raises(CommandError, match=message) as refused:
        call_command("repair", code, "--apply")
    assert refused.value.returncode == 1
    assert Ticket.objects.count() == tickets_before


@pytest.mark.broker
def test_retry_publishes_a_new_delivery_and_the_worker_makes_no_second_ticket(workers):
    registration = register_guest(name="Retry Guest")
    assert workers.run().returncode == 0
    output = run("retry", registration.code)
    assert f"Published a new delivery of {registration.code}" in output
    second = workers.run()
    assert f"Received {registration.code} redelivered=False" in second.stdout
    assert registration.tickets.count() == 1


@pytest.mark.fast
def test_retry_refuses_an_unknown_registration():
    with pytest.raises(CommandError, match="There is no registration R-0042.") as refused:
        call_command("retry", "R-0042")
    assert refused.value.returncode == 1


@pytest.mark.broker
def test_retry_says_so_when_rabbitmq_is_down(rabbit):
    registration = Registration.objects.create(name="Down Guest")
    with rabbit.down(), pytest.raises(CommandError, match="Not published") as refused:
        call_command("retry", registration.code)
    assert refused.value.returncode == 3


@pytest.mark.broker
def test_status_shows_each_state_totals_and_queue_depth(workers):
    issued = register_guest(name="Issued Guest")
    workers.run()
    pending = register_guest(name="Pending Guest")
    duplicated = with_duplicates(extra=1)
    output = run("status")
    assert f"{issued.code}  ticket issued" in output
    assert f"{pending.code}  pending" in output
    assert f"{duplicated.code}  duplicate tickets" in output
    assert (
        "Registrations: 3  pending: 1  issued: 1  ticket without its key: 0  key without ticket: 0  duplicate tickets: 1"
        in output
    )
    assert "Queue: 1 ready" in output
    shown = json.loads(run("status", "--json"))  # the same, for scripts (bin/chaos_soak.py)
    assert shown["version"] == 1
    assert {row["code"]: row["state"] for row in shown["registrations"]} == {
        issued.code: "ticket issued",
        pending.code: "pending",
        duplicated.code: "duplicate tickets",
    }
    assert shown["totals"] == {
        "registrations": 3,
        "pending": 1,
        "issued": 1,
        "ticket_without_its_key": 0,
        "key_without_ticket": 0,
        "duplicate_tickets": 1,
        "tickets": 3,
        "rejected_messages": 0,
        "parked": 0,
        "waiting_for_staff": 0,
        "waiting": 0,
        "cancelled": 0,
    }
    assert shown["capacity"] is None  # room for everyone
    assert shown["queue"]["ready"] == 1 and shown["queue_error"] == ""
    assert isinstance(shown["workers"], list)


@pytest.mark.broker
def test_status_reports_an_unreachable_broker_instead_of_failing(rabbit):
    with rabbit.down():
        output = run("status")
    assert f"Queue: unknown ({transport.name()} at" in output
    assert "guest:guest" not in output  # the password is masked
    with rabbit.down():
        shown = json.loads(run("status", "--json", "--limit", "0"))
    assert shown["queue"] is None and shown["queue_error"].startswith(f"{transport.name()} at")
    assert shown["registrations"] == [] and "guest:guest" not in json.dumps(shown)


@pytest.mark.fast
def test_repair_issues_the_ticket_of_a_completion_key_whose_ticket_was_deleted():
    registration = with_duplicates(extra=0)
    Ticket.objects.filter(registration=registration).delete()  # what no tool could undo before
    assert "issue the missing ticket" in run("repair", registration.code)
    assert not registration.tickets.exists()
    run("repair", registration.code, "--apply")
    ticket = registration.tickets.get()
    assert ticket.name == registration.name
    assert audit_invariants().passed


@pytest.mark.fast
def test_repair_apply_from_the_command_line_leaves_a_trace():
    registration = with_duplicates()
    run("repair", registration.code, "--apply")
    trace = StaffAction.objects.get(registration=registration)
    assert trace.action == "repair"
    assert "(manage.py repair --apply)" in trace.actor and "@" in trace.actor
    assert "deleted" in trace.detail


def queue_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("Queue: "))


@pytest.mark.broker
def test_status_right_after_a_ctrl_c_at_after_commit_counts_the_queue_as_it_is_now(workers):
    """The learner's Ctrl+C at after-commit, then `status` at once: nothing
    attached, and the delivery back where the broker keeps it — RabbitMQ's
    queue (ready), Redis's pending list (unacknowledged until a worker claims
    it) — with no phantom held delivery or consumer while statistics catch up."""
    registration = register_guest(name="Interrupted Guest")
    worker = workers.start("--pause", "after-commit")
    worker.wait_for(f"Received {registration.code} redelivered=False")
    worker.wait_for("Paused after-commit.")
    held = queue_line(run("status"))
    if transport.kind() == "database":
        # The ack (the row's DELETE) committed with the ticket: nothing held, nothing comes back.
        assert held.startswith("Queue: 0 ready, 0 unacknowledged, ") and held.endswith(" 0 dead-lettered"), held
        worker.signal(signal.SIGINT)
        assert worker.finish()[0] == 130
        line = queue_line(run("status"))
        assert line == "Queue: 0 ready, 0 unacknowledged, 0 consumers, 0 dead-lettered", line
        return
    assert held.startswith("Queue: 0 ready, ") and " 0 unacknowledged" not in held, held
    assert held.endswith(", 1 consumers, 0 dead-lettered"), held
    worker.signal(signal.SIGINT)  # Ctrl+C
    status, output = worker.finish()
    assert status == 130, output
    line = queue_line(run("status"))
    if transport.kind() == "amqp":
        assert line == "Queue: 1 ready, 0 unacknowledged, 0 consumers, 0 dead-lettered", line
    else:
        assert line == "Queue: 0 ready, 1 unacknowledged, 0 consumers, 0 dead-lettered", line
        held_by = f"Stream: 1 entries; unacknowledged per consumer: {socket.gethostname()} 1"
        assert held_by in run("status")  # Redis's "pending" is not the registrations' pending


@pytest.mark.fast
def test_status_totals_count_each_state_once_and_add_up():
    """One meaning per state (the design's states): a key without its ticket
    is not pending, a ticket without its key is not issued, and the totals
    line counts exactly the rows status lists in each state."""
    issued = Registration.objects.create(name="Issued")
    Completion.objects.create(registration=issued)
    Ticket.objects.create(registration=issued, name="Issued")
    without_key = Registration.objects.create(name="Ticket Only")
    Ticket.objects.create(registration=without_key, name="Ticket Only")
    key_only = Registration.objects.create(name="Key Only")
    Completion.objects.create(registration=key_only)
    Registration.objects.create(name="Waiting")
    with_duplicates("Doubled", extra=1)
    output = run("status")
    rows = [line.split("  ")[1].strip() for line in output.splitlines() if line.startswith("R-")]
    assert rows == ["ticket issued", "ticket without its key", "key without ticket", "pending", "duplicate tickets"]
    assert (
        "Registrations: 5  pending: 1  issued: 1  ticket without its key: 1  key without ticket: 1  "
        "duplicate tickets: 1  tickets: 4  rejected messages: 0"
    ) in output, output
    assert "Parked: 0 " in output
