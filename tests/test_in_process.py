"""The fast tier's own ground: the worker loop in this process on the
in-memory transport (nightjar_delivery/transport/memory.py), and the guards that keep
the tier honest. Nothing here proves a delivery guarantee — each behaviour
shown is proven on RabbitMQ and Redis with real worker processes by the
broker tier: one ticket per registration published twice
(test_competing_workers.py), poison bodies recorded once and acked
(test_delivery_contract.py::test_poison_messages_are_recorded_once_acked_and_make_no_ticket),
a database error leaves the delivery unacked
(test_crash_windows.py::test_database_error_in_the_handler_leaves_the_delivery_unacked)."""

import io
import os
import signal
import subprocess

import pytest
from django.db.models import Count

from nightjar_delivery import transport
from nightjar_delivery.checkpoints import Pause, checkpoint
from nightjar_delivery.transport import memory
from nightjar_delivery.worker import Worker
from tests.helpers import break_tickets_table, mend_tickets_table
from tickets.handler import handle
from tickets.models import Completion, Redelivery, Registration, RejectedMessage, Ticket
from tickets.services.registrations import register_guest, retry_registration

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]

BATCH = pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])


def drain(batch: int | None) -> tuple[int, str]:
    out = io.StringIO()
    worker = Worker(handler=handle, stdout=out, batch=batch)
    worker.connect()
    try:
        return worker.drain(), out.getvalue()
    finally:
        worker.close()


def test_a_fast_test_cannot_start_a_process_or_reach_a_broker():
    assert transport.kind() == "memory"
    with pytest.raises(pytest.fail.Exception, match="A fast test started a process"):
        subprocess.run(["true"])


def test_the_in_memory_queue_keeps_unacked_deliveries_and_dead_letters_past_the_limit(settings):
    settings.NIGHTJAR_DELIVERY_LIMIT = 2
    transport.publish(b"body", message_id="m1", queue=transport.queue_name())
    consumer = transport.Consumer(queue=transport.queue_name())
    first = consumer.get()
    assert (first.body, first.redelivered, first.attempts) == (b"body", False, 0)
    assert transport.queue_counts(transport.queue_name()) == {
        "ready": 0,
        "unacked": 1,
        "unacked_error": "",
        "consumers": 1,
        "dead": 0,
    }
    consumer.close()  # a deliberate hand-back: not counted
    consumer = transport.Consumer(queue=transport.queue_name())
    again = consumer.get()
    assert (again.redelivered, again.attempts) == (True, 0)
    for attempts in (1, 2):
        consumer.requeue(again.tag)  # a failure: counted
        again = consumer.get()
        assert again.attempts == attempts
    consumer.requeue(again.tag)
    assert consumer.get() is None  # past the limit: moved to the dead-letter queue
    assert consumer.get(dead=True).body == b"body"
    with pytest.raises(transport.BrokerError):
        consumer.ack(12345)
    memory.down = True
    with pytest.raises(transport.BrokerError):
        transport.ping()


@BATCH
def test_registrations_published_twice_become_one_ticket_each_in_process(batch):
    registrations = [register_guest(name=f"Guest {n % 7}") for n in range(20)]
    for registration in registrations:
        retry_registration(code=registration.code, actor="test")

    handled, _ = drain(batch)

    assert handled == 40
    assert Ticket.objects.count() == Completion.objects.count() == 20
    assert not Registration.objects.annotate(n=Count("tickets")).exclude(n=1).exists()
    counts = transport.queue_counts(transport.queue_name())
    assert (counts["ready"], counts["unacked"]) == (0, 0)


@BATCH
def test_a_poison_body_is_recorded_once_and_acked_in_process(batch):
    valid = register_guest(name="Valid Guest")
    transport.publish_raw([b"{this is not json", b'{"id":"R-99999999","name":"Nobody","v":1}'])

    drain(batch)

    assert RejectedMessage.objects.count() == 2
    assert Ticket.objects.count() == 1 and valid.tickets.count() == 1
    counts = transport.queue_counts(transport.queue_name())
    assert (counts["ready"], counts["unacked"], counts["dead"]) == (0, 0, 0)


@BATCH
def test_one_screening_path_a_redelivered_poison_body_is_rejected_and_noted_as_a_redelivery(batch):
    """A delivery is a batch of one (Worker.screen): per delivery as in a
    batch, the rejection is recorded, the delivery acked, and its coming again
    noted for staff (per delivery, this was skipped before the one path)."""
    transport.publish_raw([b'{"id":"R-99999999","name":"Nobody","v":1}'])
    peek = transport.Consumer(queue=transport.queue_name())
    assert peek.get() is not None
    peek.close()  # handed back: it comes again, redelivered

    _, out = drain(batch)

    assert "Rejected a delivery redelivered=True: There is no registration R-99999999" in out
    assert RejectedMessage.objects.count() == 1
    assert list(Redelivery.objects.values_list("registration_id", flat=True)) == [None]
    assert transport.queue_counts(transport.queue_name())["ready"] == 0


def test_a_database_error_in_process_leaves_the_delivery_for_a_later_run():
    registration = register_guest(name="Unlucky Guest")
    break_tickets_table()
    try:
        with pytest.raises(Exception, match="tickets_ticket"):
            drain(None)
    finally:
        mend_tickets_table()
    assert (Ticket.objects.count(), Completion.objects.count()) == (0, 0)
    assert transport.queue_counts(transport.queue_name())["ready"] == 1  # handed back, not acked

    drain(None)
    assert registration.tickets.count() == 1


class CtrlCAsItSaysPaused(io.StringIO):
    """The learner's Ctrl+C landing the moment "Paused NAME." is on screen:
    SIGINT is delivered while the worker writes that line."""

    def write(self, text: str) -> int:
        written = super().write(text)
        if text.startswith("Paused "):
            os.kill(os.getpid(), signal.SIGINT)
        return written


def test_ctrl_c_the_moment_a_serving_worker_says_paused_leaves_the_pause():
    """Seen in CI as a `worker --serve --pause after-commit` that never exited
    after its Ctrl+C: a SIGINT that came after "Paused" was printed but before
    the pause began to wait was taken for "finish, then stop", and the worker
    then waited for Enter for ever. (Enter is ready on stdin here, so the bug
    shows as no KeyboardInterrupt rather than as a hang.)"""
    screen = CtrlCAsItSaysPaused()
    pause = Pause(at="after-commit", stdin=io.StringIO("\n"), stdout=screen)
    pause.stdin.fileno = lambda: os.open(os.devnull, os.O_RDONLY)  # select() on a ready file
    worker = Worker(handler=handle, pause=pause, stdout=screen)
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    worker.install_signal_handlers()
    try:
        with pytest.raises(KeyboardInterrupt):
            checkpoint(pause, "after-commit")
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    assert "finishing the current delivery" not in screen.getvalue()


def test_every_process_the_tests_start_gets_ctrl_c_even_from_a_background_run():
    """A test run started in the background (`setsid bash -c 'bin/test' &`)
    inherits SIGINT ignored, and its children inherit that across exec:
    every Ctrl+C the tests send (to a worker, to bin/run, in the guide's
    terminal) was then lost, and those tests waited out their timeouts and
    failed. tests/conftest.py restores it once, in this process: what a
    child inherits is this process's disposition (ignored stays ignored; a
    handler becomes the default) and its signal mask."""
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
