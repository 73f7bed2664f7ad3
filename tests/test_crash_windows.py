"""The three windows where a worker can die, proven with a real worker process
stopped at each checkpoint and then killed for real (SIGKILL, or Ctrl+C)."""

import signal

import pytest

from nightjar_delivery import transport
from tests.helpers import MODES, break_tickets_table, mend_tickets_table
from tickets.models import Completion, Ticket
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# What the database holds once the worker died at each checkpoint.
STATE_AFTER_DEATH = {
    "before-write": (0, 0),  # (completion keys, tickets)
    "inside-transaction": (0, 0),  # rolled back
    "after-commit": (1, 1),  # committed, never acked
}


# Every guarantee holds in both modes (tests/helpers.py): one delivery per
# transaction, and batch mode (one transaction and one multiple=True ack per batch).


def rows() -> tuple[int, int]:
    return Completion.objects.count(), Ticket.objects.count()


@MODES
@pytest.mark.parametrize("checkpoint", list(STATE_AFTER_DEATH))
@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl+C"])
def test_worker_killed_at_a_checkpoint_ends_with_exactly_one_ticket(checkpoint, how, mode, workers):
    registration = register_guest(name="Crash Test")
    worker = workers.start(*mode, "--pause", checkpoint)
    assert worker.wait_for(f"Received {registration.code} redelivered=False")
    worker.wait_for(f"Paused {checkpoint}.")

    if how == "SIGKILL":
        worker.signal(signal.SIGKILL)
        status, output = worker.finish()
        assert status == -signal.SIGKILL
    else:
        worker.signal(signal.SIGINT)
        status, output = worker.finish()
        assert status == 130, output
        assert "Traceback" not in output
    assert rows() == STATE_AFTER_DEATH[checkpoint]

    rerun = workers.run(*mode)
    assert rerun.returncode == 0, rerun.stderr
    if checkpoint == "after-commit" and transport.kind() == "database":
        # Stronger on the database transport: the ack (the row's DELETE) committed with the
        # ticket, so there is nothing to redeliver (transport.ack_within).
        assert rerun.stdout.strip() == "No ready registrations"
        assert rows() == (1, 1)
        if how == "Ctrl+C":
            assert "the delivery was already acked" in output
        return
    assert f"Received {registration.code} redelivered=True" in rerun.stdout
    assert "Handler returned." in rerun.stdout
    assert rows() == (1, 1)
    assert Ticket.objects.get().registration_id == registration.pk
    # Acked this time: nothing is left to redeliver.
    assert workers.run(*mode).stdout.strip() == "No ready registrations"


@MODES
def test_enter_at_a_pause_continues_and_acks(mode, workers):
    registration = register_guest(name="Patient Learner")
    worker = workers.start(*mode, "--pause", "inside-transaction")
    worker.wait_for("Paused inside-transaction.")
    worker.send("")
    worker.wait_for("Handler returned.")
    status, _ = worker.finish()
    assert status == 0
    assert rows() == (1, 1)
    assert registration.tickets.count() == 1
    assert workers.run(*mode).stdout.strip() == "No ready registrations"


@pytest.mark.parametrize(("crash", "status", "state"), [("before", 21, (0, 0)), ("after", 22, (1, 1))])
@MODES
def test_crash_switch_exits_abruptly_and_redelivery_makes_one_ticket(crash, status, state, mode, workers):
    register_guest(name="Crash Switch")
    result = workers.run(*mode, "--crash", crash)
    assert result.returncode == status, result.stdout + result.stderr
    assert rows() == state
    rerun = workers.run(*mode)
    if crash == "after" and transport.kind() == "database":
        assert rerun.stdout.strip() == "No ready registrations"  # the ack committed with the ticket
    else:
        assert "redelivered=True" in rerun.stdout
    assert rows() == (1, 1)


@MODES
def test_database_error_in_the_handler_leaves_the_delivery_unacked(mode, workers):
    registration = register_guest(name="Unlucky Guest")
    break_tickets_table()
    try:
        failed = workers.run(*mode)
    finally:
        mend_tickets_table()
    assert failed.returncode == 1
    assert "Not acked" in failed.stderr
    assert rows() == (0, 0)  # the completion key was rolled back with the failed ticket insert

    rerun = workers.run(*mode)
    assert f"Received {registration.code} redelivered=True" in rerun.stdout
    assert rows() == (1, 1)
