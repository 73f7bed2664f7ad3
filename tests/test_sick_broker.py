"""A broker that is down, frozen (accepts TCP, answers nothing) or blocking
publishers never makes a guest wait: every wait on RabbitMQ has a deadline
(NIGHTJAR_BROKER_TIMEOUT, 1 s), every failure is a BrokerError with a
sentence, the registration is stored and reconcile publishes it later.
The node is frozen for real with SIGSTOP and alarmed for real with
`rabbitmqctl set_vm_memory_high_watermark`."""

import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from devtools.guest import Guest
from devtools.ports import free_port
from nightjar_delivery import transport
from nightjar_delivery.transport import Backoff, amqp
from tests.conftest import ROOT
from tickets.models import Registration
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import publish_registration, register_guest

pytestmark = pytest.mark.django_db(transaction=True)
# Generous: the deadline is 1 s; this bound only catches a wait with none.
POST_BOUND = 3.0


def report(what: str, seconds: list[float]) -> None:
    print(f"{what}: " + ", ".join(f"{s:.2f} s" for s in seconds))


def assert_registration_page(status: int, page: str) -> None:
    assert status == 200
    assert "Your ticket is being prepared" in page


@pytest.mark.broker_service
@pytest.mark.system
def test_posts_on_an_open_connection_and_on_a_new_one_answer_fast_when_rabbitmq_is_frozen(site, rabbit, workers):
    guest = Guest(site)
    assert_registration_page(*guest.register("Before The Freeze")[:2])  # the publisher connection is open now
    times = []
    with rabbit.frozen():
        for n in range(4):
            status, page, seconds = guest.register(f"Frozen Guest {n}")
            assert_registration_page(status, page)
            times.append(seconds)
        status, body = guest.get("/healthz")
        health_started = time.monotonic()
        status, body = guest.get("/healthz")
        health_seconds = time.monotonic() - health_started
    report("POST with RabbitMQ frozen", times)
    assert max(times) < POST_BOUND
    assert status == 503 and f'"{transport.name().lower()}": "unavailable"' in body
    assert health_seconds < POST_BOUND
    assert Registration.objects.count() == 5
    # Thawed: reconcile publishes what was left, and the worker makes every ticket.
    assert reconcile_registrations(older_than=0).published
    assert "Drained" in workers.run("--drain").stdout
    assert all(r.tickets.count() == 1 for r in Registration.objects.all())


@pytest.mark.broker_service
@pytest.mark.system
def test_a_new_gunicorn_process_that_must_connect_to_a_frozen_broker_answers_fast(site, rabbit):
    # A fresh web process has no connection yet: its first publish must connect.
    with rabbit.frozen():
        status, page, seconds = Guest(site).register("Connects While Frozen")
    report("POST that must connect, RabbitMQ frozen", [seconds])
    assert_registration_page(status, page)
    assert seconds < POST_BOUND


@pytest.mark.system
@pytest.mark.amqp_only  # a RabbitMQ resource alarm
def test_posts_during_a_memory_alarm_answer_fast_and_are_published_after_it(site, rabbit, workers):
    guest = Guest(site)
    assert_registration_page(*guest.register("Before The Alarm")[:2])
    times = []
    with rabbit.memory_alarm():
        for n in range(5):
            status, page, seconds = guest.register(f"Alarm Guest {n}")
            assert_registration_page(status, page)
            times.append(seconds)
    report("POST during a memory alarm", times)
    assert max(times) < POST_BOUND
    assert sum(times[1:]) < POST_BOUND  # the blocked connection is noticed: later POSTs do not wait again
    reconcile_registrations(older_than=0)
    workers.run("--drain")
    assert all(r.tickets.count() == 1 for r in Registration.objects.all())


@pytest.mark.broker_service
@pytest.mark.broker
def test_the_service_worker_reconnects_after_a_freeze_and_goes_on(rabbit, workers):
    worker = workers.start("--serve")
    worker.wait_for("Serving")
    with rabbit.frozen():
        worker.wait_for(f"{transport.name()} is unavailable; reconnecting", timeout=60)
        assert worker.proc.poll() is None
    registration = register_guest(name="After The Thaw")
    worker.wait_for(f"Received {registration.code}", timeout=90)
    worker.wait_for("Handler returned.")
    assert worker.proc.poll() is None


@pytest.mark.broker_service
@pytest.mark.broker
@pytest.mark.parametrize(
    ("command", "message", "status"),
    [
        (["reconcile", "--older-than", "0"], "Stopped: {broker}", 3),
        (["retry", "{code}"], "{broker}", 3),
        (["worker"], "{broker}", 3),
    ],
    ids=["reconcile", "retry", "worker"],
)
def test_commands_fail_with_their_message_and_status_when_rabbitmq_is_frozen(
    rabbit, worker_env, command, message, status
):
    code = Registration.objects.create(name="Waiting Guest").code
    command = [part.format(code=code) for part in command]
    message = message.format(broker=transport.name())
    with rabbit.frozen():
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *command],
            env=worker_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        seconds = time.monotonic() - started
    report(f"{command[0]} with RabbitMQ frozen", [seconds])
    assert result.returncode == status, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.fast
def test_every_pika_failure_is_a_broker_error():
    pika = amqp.pika  # the tests import no broker library either
    stack_timeout = pika.adapters.utils.connection_workflow.AMQPConnectorStackTimeout("x")
    errors = (
        stack_timeout,
        pika.exceptions.ReentrancyError(),
        pika.exceptions.ConnectionWrongStateError(),
        TimeoutError(),
    )
    for error in errors:
        with pytest.raises(transport.BrokerError), amqp.translated_errors("test"):
            raise error
    with pytest.raises(KeyError), amqp.translated_errors("test"):  # our own bugs are not dressed up as outages
        raise KeyError("bug")


@pytest.mark.broker
@pytest.mark.amqp_only
def test_a_nacked_publish_gets_a_fresh_connection_for_the_next_one(rabbit):
    """After a quorum queue's leader changes, a channel can have every later
    publish nacked until the connection is reopened: a nack must drop the
    connection. RabbitMQ nacks for real here: a policy makes the queue refuse
    new messages (max-length 0, reject-publish)."""
    registration = register_guest(name="Nacked Guest")  # the publisher's connection is open now
    before = amqp.publisher._thread.connection
    assert before is not None and before.is_open
    policy = f"nack-{transport.queue_name()}"
    rabbit.ctl("set_policy", policy, f"^{transport.queue_name()}$", '{"max-length":0,"overflow":"reject-publish"}')
    try:
        deadline = time.monotonic() + 10  # a policy applies within moments
        while True:
            try:
                publish_registration(registration)
            except transport.BrokerError as error:
                refused = str(error)
                break
            assert time.monotonic() < deadline, "RabbitMQ never nacked"
            time.sleep(0.2)
    finally:
        rabbit.ctl("clear_policy", policy)
    assert "RabbitMQ refused the message" in refused
    assert amqp.publisher._thread.connection is None  # dropped, not kept for the next publish
    time.sleep(Backoff.START + 0.1)  # the publisher's backoff after a failure
    publish_registration(registration)
    after = amqp.publisher._thread.connection
    assert after is not None and after is not before and after.is_open


@pytest.mark.broker
@pytest.mark.amqp_only
def test_a_node_list_is_tried_in_a_shuffled_order_past_a_dead_node(rabbit, settings, workers, worker_env):
    """NIGHTJAR_BROKER_URL may list a cluster's nodes separated by `;`: every
    process picks them in a random order and moves past one that refuses."""
    dead = rabbit.url.replace(f":{urlsplit(rabbit.url).port}/", f":{free_port()}/")
    settings.NIGHTJAR_BROKER_URL = worker_env["NIGHTJAR_BROKER_URL"] = f"{dead};{rabbit.url}"
    orders = {tuple(p.port for p in amqp.parameters()) for _ in range(50)}
    assert len(orders) == 2  # both orders occur
    assert all(p.connection_attempts == 1 and p.heartbeat == 10 for p in amqp.parameters())
    assert amqp.masked_url().count(":***@") == 2 and "guest:guest" not in amqp.masked_url()
    started = time.monotonic()
    registrations = [register_guest(name=f"Listed Node {n}") for n in range(5)]
    assert time.monotonic() - started < POST_BOUND
    assert "Drained 5" in workers.run("--drain").stdout
    assert all(r.tickets.count() == 1 for r in registrations)
