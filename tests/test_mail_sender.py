"""The mail sender as a real process (`manage.py send_mail`) against a real
SMTP server (devtools/mailserver.py): a full evening through the guest's
pages, a real worker and the sender, every mail once; killed -9 inside the
one window (the server has the mail, the sender has not recorded it), the
copy carries the same Message-ID; competing senders send each mail once."""

import os
import signal
import subprocess
import sys

import pytest

from mail.models import Mail, State
from tests.conftest import ROOT
from tests.helpers import submission_key, until
from tests.test_seats import drain
from tickets.services import seats
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def mail_env(worker_env, smtp):
    return {
        **worker_env,
        "NIGHTJAR_SMTP_HOST": smtp.host,
        "NIGHTJAR_SMTP_PORT": str(smtp.port),
        "NIGHTJAR_SMTP_TIMEOUT": "5",
        "NIGHTJAR_MAIL_RETRY_SECONDS": "0",
    }


@pytest.fixture
def senders(mail_env):
    started: list[subprocess.Popen] = []

    def start(*args: str, lease: float = 1) -> subprocess.Popen:
        command = [sys.executable, str(ROOT / "manage.py"), "send_mail", "--serve", "--poll", "0.2", *args]
        env = {**mail_env, "NIGHTJAR_MAIL_LEASE_SECONDS": str(lease)}
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def guests_with_tickets(count: int) -> None:
    for i in range(count):
        register_guest(name=f"Guest {i}", email=f"guest{i}@example.org")
    drain()


@pytest.mark.transport_free
@pytest.mark.postgres
def test_a_sender_killed_after_the_server_took_the_mail_sends_it_again_with_the_same_message_id(
    smtp, senders, tmp_path
):
    guests_with_tickets(1)
    victim: list[subprocess.Popen] = []
    # The server has the whole mail; before it answers 250, the sender is SIGKILLed:
    # it never hears the acceptance, so it cannot record it (the named window).
    smtp.rules.on_data = lambda received: os.kill(victim[0].pid, signal.SIGKILL)
    victim.append(senders())
    assert victim[0].wait(timeout=60) == -signal.SIGKILL
    mail = Mail.objects.get()
    assert (mail.state, mail.attempts, len(smtp.received)) == (State.WAITING, 1, 1)  # claimed, never recorded
    smtp.rules.on_data = None
    health = tmp_path / "send_mail.alive"
    second = senders("--health-file", str(health))
    until(lambda: Mail.objects.get().state == State.SENT, what="the mail sent after the lease ran out")
    assert health.exists()
    second.send_signal(signal.SIGTERM)
    output, _ = second.communicate(timeout=30)
    assert second.returncode == 0 and "Stopped; 1 sent." in output, output
    mail.refresh_from_db()
    assert mail.attempts == 2
    assert [received.message_id for received in smtp.received] == [mail.message_id, mail.message_id]


@pytest.mark.transport_free
@pytest.mark.postgres
def test_competing_senders_send_each_mail_once(smtp, senders):
    guests_with_tickets(30)
    running = [senders(lease=60), senders(lease=60)]
    until(lambda: Mail.objects.filter(state=State.SENT).count() == 30, what="30 mails sent")
    for proc in running:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    ids = [received.message_id for received in smtp.received]
    assert len(ids) == 30 and set(ids) == set(Mail.objects.values_list("message_id", flat=True))
    assert set(Mail.objects.values_list("attempts", flat=True)) == {1}


def test_a_full_evening_told_by_mail_each_fact_once(client, smtp, workers, mail_env):
    """The issue's "Done when": a guest registers with an address on a full
    evening, another cancels, and the first finds "a seat is yours" and then
    the ticket in the mail (the worker in batch mode: its handler's tickets tell too)."""
    from tickets.models import Registration

    seats.set_capacity(capacity=1, actor="organiser (test)")
    for name in ("Ada Seated", "Bo Waiting"):
        key = submission_key(client.get("/evening/").content.decode())
        client.post(
            "/evening/", {"name": name, "email": f"{name.split()[0].lower()}@example.org", "submission_key": key}
        )
    ada, bo = Registration.objects.order_by("pk")
    assert (ada.seat, bo.seat) == ("confirmed", "waiting")
    worked = workers.run("--drain", "--batch", "10")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    client.post(f"/registrations/{ada.code}/{ada.secret}/cancel/")  # the guest cancels: Bo gets the seat
    worked = workers.run("--drain", "--batch", "10")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    sent = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "send_mail"],
        env=mail_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sent.returncode == 0 and "5 sent to the mail server" in sent.stdout, sent.stdout + sent.stderr
    subjects = {
        address: [r.message["Subject"] for r in smtp.to(address)] for address in ("ada@example.org", "bo@example.org")
    }
    assert subjects == {
        "ada@example.org": [f"Your ticket for the evening ({ada.code})", f"Your registration {ada.code} is cancelled"],
        "bo@example.org": [
            "You are on the waiting list (place 1)",
            f"A seat is yours ({bo.code})",
            f"Your ticket for the evening ({bo.code})",
        ],
    }
    assert len({r.message_id for r in smtp.received}) == 5
    assert "Your ticket: sent" in client.get(f"/registrations/{bo.code}/{bo.secret}/").content.decode()
