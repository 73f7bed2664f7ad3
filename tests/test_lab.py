"""The learner lab: pauses that keep the connection alive, the handler switch,
and verify_handler's verdicts on the safe and the two unsafe handlers."""

import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, TRANSPORT
from tickets.models import Ticket
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


def test_unknown_checkpoint_is_refused_with_the_valid_names(workers):
    result = workers.run("--pause", "halfway")
    assert result.returncode == 2
    assert "invalid choice: 'halfway'" in result.stderr
    assert "'before-write', 'inside-transaction', 'after-commit'" in result.stderr


def test_pause_with_drain_stops_at_every_delivery(workers):
    first, second = register_guest(name="First"), register_guest(name="Second")
    worker = workers.start("--drain", "--pause", "after-commit")
    worker.wait_for(f"Received {first.code} redelivered=False")
    worker.wait_for("Paused after-commit.")
    worker.send("")
    worker.wait_for(f"Received {second.code} redelivered=False")
    worker.wait_for("Paused after-commit.")
    worker.send("")
    status, output = worker.finish()
    assert status == 0, output
    assert "Drained 2 deliveries" in output
    assert Ticket.objects.count() == 2


@pytest.mark.amqp_only  # AMQP heartbeats; a paused Redis consumer holds its entries without any
def test_a_long_pause_keeps_the_connection_so_nobody_else_gets_the_delivery(workers, worker_env):
    registration = register_guest(name="Slow Learner")
    heartbeat_env = {**worker_env, "NIGHTJAR_BROKER_URL": worker_env["NIGHTJAR_BROKER_URL"] + "?heartbeat=1"}
    paused = workers.start("--pause", "before-write", env=heartbeat_env)
    paused.wait_for("Paused before-write.")

    # Several heartbeat intervals: RabbitMQ closes a connection that misses
    # two, and would then hand the delivery to the other worker.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        other = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "worker", "--drain"],
            env=heartbeat_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Drained 0 deliveries" in other.stdout, other.stdout + other.stderr

    paused.send("")
    paused.wait_for("Handler returned.")
    status, output = paused.finish()
    assert status == 0, output
    assert registration.tickets.count() == 1


def verify(handler: str, worker_env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "verify_handler", "--handler", handler],
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_verify_handler_fails_ack_first_because_it_loses_the_ticket(worker_env):
    result = verify("tickets.unsafe_handlers.ack_first", worker_env)
    assert result.returncode == 1
    broker = "Redis" if TRANSPORT == "redis" else "RabbitMQ"  # the broker in use, by name
    assert f"FAIL  interrupted before the write: {broker} had nothing to redeliver" in result.stdout
    assert "FAIL  interrupted inside the transaction" in result.stdout


def test_verify_handler_fails_no_completion_key_because_it_duplicates(worker_env):
    result = verify("tickets.unsafe_handlers.no_completion_key", worker_env)
    assert result.returncode == 1
    assert "FAIL  interrupted after commit, before ack: 2 tickets after the redelivery" in result.stdout
    assert "PASS  interrupted before the write" in result.stdout


def test_verify_handler_passes_the_safe_handler_and_never_touches_the_real_queue_or_data(worker_env):
    registration = register_guest(name="Real Guest")
    result = verify("tickets.handler.handle", worker_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASS") == 6
    assert "6 of 6 scenarios passed" in result.stdout
    assert Ticket.objects.count() == 0
    # The real delivery is still waiting in the real queue.
    real = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "worker"], env=worker_env, capture_output=True, text=True
    )
    assert f"Received {registration.code} redelivered=False" in real.stdout


def test_verify_handler_refuses_a_handler_that_does_not_exist(worker_env):
    result = verify("tickets.nowhere.handle", worker_env)
    assert result.returncode == 2
    assert "Cannot load handler 'tickets.nowhere.handle'" in result.stderr
