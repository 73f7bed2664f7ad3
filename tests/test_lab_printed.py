"""What the lab commands and a paused worker print fits the guide the learner
follows (docs/lab.md or docs/lab.ru.md) and the data they really have. Fast:
the in-memory transport, no process."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from delivery.checkpoints import Pause, checkpoint
from tickets.models import WorkerReport
from tickets.services.demo import seed_demo
from tickets.services.registrations import register_guest
from tickets.services.workers import worker_reports

pytestmark = [pytest.mark.fast, pytest.mark.django_db]


@pytest.fixture
def lab_mode(settings, tmp_path):
    settings.NIGHTJAR_LAB = True
    settings.NIGHTJAR_LAB_DIR = tmp_path
    seed_demo()


def lab(*args: str) -> str:
    out = io.StringIO()
    call_command("lab", *args, stdout=out)
    return out.getvalue()


def test_lab_start_points_to_the_step_in_both_guides(lab_mode):
    """A learner on the Russian guide is not sent to the English one alone."""
    printed = lab("start")
    assert "Next: step 1 of docs/lab.md (in Russian: docs/lab.ru.md)." in printed, printed


def test_lab_start_at_a_later_step_names_the_registrations_there_really_are(lab_mode):
    """After `lab reset` (the Redis part), step 3 names no guest the learner
    does not have: Mina Patel only, and the next guest gets R-0002."""
    printed = lab("start", "--step", "3", "--force")
    assert "Data: not changed: Mina Patel (R-0001) only; the next guest you register gets R-0002." in printed
    assert "Normal guest" not in printed, printed
    register_guest(name="Normal guest")
    register_guest(name="Retry guest")
    printed = lab("start", "--step", "3", "--force")
    assert "Data: not changed: R-0001 to R-0003; the next guest you register gets R-0004." in printed, printed


def test_lab_reset_forgets_the_workers_of_the_earlier_runs(lab_mode):
    """The Redis part starts with `lab reset`: its status then lists only the
    workers that ran since, not the RabbitMQ part's."""
    now = timezone.now()
    WorkerReport.objects.create(
        name="vm:8229", host="vm", pid=8229, transport="amqp", mode="one delivery", started=now, last_seen=now
    )
    register_guest(name="Normal guest")
    assert "Deleted 1 registrations" in lab("reset", "--yes")
    assert worker_reports(within=timedelta(days=1)) == []


def test_a_paused_worker_says_what_to_press():
    """The lesson's line stays as it is, and the next one says which key does what."""
    screen = io.StringIO()
    pause = Pause(at="before-write", stdin=io.StringIO("\n"), stdout=screen)
    pause.stdin.fileno = lambda: 0  # select() on a ready file
    checkpoint(pause, "before-write")
    assert screen.getvalue().splitlines() == ["Paused before-write.", "Press Enter to go on, Ctrl+C to stop."]


def test_lab_check_says_the_fix_comes_before_the_repair(lab_mode):
    """Step 1's failing grade: a literal reader must not repair while the
    handler still ignores the key (a redelivery would make a second ticket anyway)."""
    from classroom.lab import data_checks
    from tickets.models import Ticket

    registration = register_guest(name="Normal guest")
    Ticket.objects.create(registration=registration, name=registration.name)  # the ack-first handler's work
    check = next(c for c in data_checks() if c.name == "every ticket has its completion key")
    assert not check.passed
    assert "Make your handler safe first (step 3), then `python manage.py repair R-0002 --apply`" in check.reason
