"""The learner's exercise, run as a learner would: `lab start`, then the
three versions of the handler written into the learner's file in turn, the
worker run as a real process paused at a checkpoint and interrupted with a
real Ctrl+C (SIGINT), and `lab check` grading each version."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from classroom import lab
from nightjar_delivery import transport
from tests.conftest import ROOT, TRANSPORT
from tickets import handlers
from tickets.models import Completion, Registration
from tickets.services.demo import seed_demo
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]

# Step 2: the learner moves the ack after the commit (no completion key yet).
ACK_AFTER_COMMIT = """
from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Ticket


def handle(message, ack, pause=None):
    checkpoint(pause, "before-write")
    with transaction.atomic():
        Ticket.objects.create(registration_id=message.registration_id, name=message.name)
        checkpoint(pause, "inside-transaction")
    checkpoint(pause, "after-commit")
    ack()
"""

# Step 3: the completion key in the same transaction; the ticket only when it is new.
WITH_COMPLETION_KEY = """
from django.db import transaction

from tickets.checkpoints import checkpoint
from tickets.models import Completion, Ticket


def handle(message, ack, pause=None):
    checkpoint(pause, "before-write")
    with transaction.atomic():
        is_new = Completion.objects.insert_if_new(registration_id=message.registration_id)
        checkpoint(pause, "inside-transaction")
        if is_new:
            Ticket.objects.create(registration_id=message.registration_id, name=message.name)
    checkpoint(pause, "after-commit")
    ack()
"""


@pytest.fixture
def learner(worker_env, workers, tmp_path, settings):
    """The learner's second terminal: lab mode, a lab folder of the test's own."""
    settings.NIGHTJAR_LAB = True
    settings.NIGHTJAR_LAB_DIR = tmp_path
    env = {**worker_env, "NIGHTJAR_LAB": "1", "NIGHTJAR_LAB_DIR": str(tmp_path)}
    workers.env = env
    seed_demo()
    return Learner(env, workers)


class Learner:
    def __init__(self, env, workers) -> None:
        self.env = env
        self.workers = workers

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )

    def interrupt_at(self, checkpoint: str, code: str) -> str:
        worker = self.workers.start("--pause", checkpoint)
        worker.wait_for(f"Received {code} redelivered=")
        worker.wait_for(f"Paused {checkpoint}.")
        worker.signal(signal.SIGINT)  # Ctrl+C
        status, output = worker.finish()
        assert status == 130, output
        return output

    def worker(self, *args: str) -> str:
        result = self.workers.run(*args)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def state(self, code: str) -> str:
        line = next(line for line in self.manage("status").stdout.splitlines() if line.startswith(code))
        return line.split("  ")[1].strip()

    def check(self) -> tuple[int, str]:
        result = self.manage("lab", "check")
        return result.returncode, result.stdout + result.stderr


@pytest.mark.skipif(
    TRANSPORT != "redis",
    reason="on RabbitMQ, docs/lab.md's run (test_lab_guide_run.py) walks this whole exercise and checks every line"
    " it prints; its Redis part starts at step 3, so this runs in the Redis leg",
)
def test_the_whole_exercise_from_the_unsafe_handler_to_a_passing_lab_check(learner):
    started = learner.manage("lab", "start")
    assert started.returncode == 0, started.stderr
    assert f"Your handler is {handlers.shown(str(handlers.handler_file()))}" in started.stdout
    assert handlers.handler_file().read_text() == lab.START_FILE.read_text()

    # Step 1: the starting handler acks first. The normal flow works...
    normal = register_guest(name="Normal guest")
    assert learner.worker() == f"Received {normal.code} redelivered=False\nHandler returned.\n"
    # ...but Ctrl+C before the write loses the delivery: RabbitMQ was told "done".
    early = register_guest(name="Early ack")
    interrupted = learner.interrupt_at("before-write", early.code)
    assert f"the delivery was already acked, so {transport.name()} has forgotten it: nothing goes back." in interrupted
    assert learner.worker().strip() == "No ready registrations"
    assert learner.state(early.code) == "pending"
    status, output = learner.check()
    assert status == 1
    assert "FAIL  handler, interrupted before the write" in output
    assert "look at where handle() calls ack(): it must come after the transaction commits." in output
    assert f"FAIL  no lost registrations: no ticket for {early.code}: its delivery was lost." in output, output
    assert f"python manage.py retry {early.code}" in output
    assert "PASS  Mina Patel's ticket intact" in output
    assert learner.manage("retry", early.code).returncode == 0
    assert f"Received {early.code} redelivered=False" in learner.worker()

    # Step 2: the ack after the commit. Interrupted before the write: redelivered, one ticket.
    handlers.handler_file().write_text(ACK_AFTER_COMMIT)
    moved = register_guest(name="Ack after commit")
    assert f"Interrupted; the delivery goes back to {transport.name()}." in learner.interrupt_at(
        "before-write", moved.code
    )
    assert f"Received {moved.code} redelivered=True" in learner.worker()
    assert moved.tickets.count() == 1
    # Interrupted after the commit: the redelivery makes a second ticket.
    second = register_guest(name="Second window")
    learner.interrupt_at("after-commit", second.code)
    assert second.tickets.count() == 1
    assert f"Received {second.code} redelivered=True" in learner.worker()
    assert learner.state(second.code) == "duplicate tickets"
    status, output = learner.check()
    assert status == 1
    assert "PASS  handler, interrupted before the write" in output
    assert "FAIL  handler, interrupted after commit, before ack" in output
    assert "look at the completion key" in output
    assert f"FAIL  no duplicate tickets: more than one ticket for {second.code}" in output, output
    assert "PASS  no lost registrations" in output
    assert "Applied: 1 ticket(s) deleted" in learner.manage("repair", second.code, "--apply").stdout

    # Step 3: the completion key in the same transaction.
    handlers.handler_file().write_text(WITH_COMPLETION_KEY)
    inside = register_guest(name="Inside")
    learner.interrupt_at("inside-transaction", inside.code)
    assert not Completion.objects.filter(registration=inside).exists() and not inside.tickets.exists()  # rolled back
    assert f"Received {inside.code} redelivered=True" in learner.worker()
    after = register_guest(name="After commit")
    learner.interrupt_at("after-commit", after.code)
    assert f"Received {after.code} redelivered=True" in learner.worker()
    assert after.tickets.count() == 1
    for _ in range(2):
        register_guest(name="Same name")
    assert "Drained 2 deliveries" in learner.worker("--drain")
    assert [r.tickets.count() for r in Registration.objects.filter(name="Same name")] == [1, 1]

    # The first two versions wrote no completion keys: a redelivery would make a
    # second ticket. lab check says so, and repair adds the keys.
    status, output = learner.check()
    keyless = [normal.code, early.code, moved.code]
    assert (
        f"FAIL  every ticket has its completion key: a ticket but no completion key for {', '.join(keyless)}" in output
    )
    for code in keyless:
        assert "completion key" in learner.manage("repair", code, "--apply").stdout

    status, output = learner.check()
    assert status == 0, output
    assert "FAIL" not in output
    assert "All " in output and "checks passed: your handler is safe and the exercise is complete." in output


def test_lab_start_never_overwrites_the_learners_file_without_force(learner):
    assert learner.manage("lab", "start").returncode == 0
    handlers.handler_file().write_text(WITH_COMPLETION_KEY)
    again = learner.manage("lab", "start")
    assert again.returncode == 2 and "already exists; your changes are kept" in again.stderr
    assert handlers.handler_file().read_text() == WITH_COMPLETION_KEY
    assert learner.manage("lab", "start", "--force").returncode == 0
    assert handlers.handler_file().read_text() == lab.START_FILE.read_text()


def test_lab_start_step_writes_that_steps_handler_and_leaves_the_data(learner):
    assert learner.manage("lab", "start", "--step", "2").returncode == 0
    assert handlers.handler_file().read_text() == lab.STEP_FILES[2].read_text()
    again = learner.manage("lab", "start", "--step", "3")
    assert again.returncode == 2 and "already exists; your changes are kept" in again.stderr
    assert handlers.handler_file().read_text() == lab.STEP_FILES[2].read_text()
    jumped = learner.manage("lab", "start", "--step", "3", "--force")
    assert jumped.returncode == 0, jumped.stderr
    assert "Data: not changed: Mina Patel (R-0001) only; the next guest you register gets R-0002." in jumped.stdout
    assert handlers.handler_file().read_text() == lab.STEP_FILES[3].read_text()
    assert Registration.objects.count() == 1  # Mina Patel only: no data was set up
    assert "invalid choice: 4" in learner.manage("lab", "start", "--step", "4", "--force").stderr

    # Step 2's file really is the ack after the commit: Ctrl+C before the write gives the delivery back.
    assert learner.manage("lab", "start", "--step", "2", "--force").returncode == 0
    retry = register_guest(name="Retry guest")
    learner.interrupt_at("before-write", retry.code)
    assert f"Received {retry.code} redelivered=True" in learner.worker()
    assert retry.tickets.count() == 1 and not Completion.objects.filter(registration=retry).exists()


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("def handle(message, ack, pause=None):\nack()\n", "line 2: expected an indented block"),
        ("def handle(message, ack, pause=None)\n    ack()\n", "line 1: expected ':'"),
        ("import nonexistent_module\n", "line 1: ModuleNotFoundError"),
        ("x = 1\n", "has no handle(message, ack, pause=None) function"),
    ],
    ids=["indentation", "syntax", "import", "no-handle"],
)
def test_a_broken_learner_file_gets_a_short_message_and_the_delivery_stays(learner, broken, message):
    learner.manage("lab", "start")
    handlers.handler_file().write_text(broken)
    registration = register_guest(name="Waiting Guest")
    result = learner.workers.run()
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert str(handlers.handler_file()) in result.stderr
    assert f"Nothing was taken from {transport.name()}" in result.stderr
    handlers.handler_file().write_text(WITH_COMPLETION_KEY)
    assert f"Received {registration.code} redelivered=False" in learner.worker()


def test_lab_commands_refuse_outside_lab_mode(learner):
    env = {**learner.env, "NIGHTJAR_LAB": "0"}
    for action in ("start", "check", "reset"):
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "lab", action], env=env, capture_output=True, text=True
        )
        assert result.returncode == 2
        assert "The lab runs only in lab mode" in result.stderr
    assert not handlers.handler_file().exists()


def test_outside_lab_mode_the_worker_never_runs_the_learners_file(learner):
    learner.manage("lab", "start")
    registration = register_guest(name="Production Guest")
    env = {**learner.env, "NIGHTJAR_LAB": "0"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "worker"], env=env, capture_output=True, text=True, timeout=60
    )
    assert f"Received {registration.code}" in result.stdout
    assert Completion.objects.filter(registration=registration).exists()  # the safe handler wrote the key


def test_the_web_process_never_imports_the_learners_file(learner, client):
    learner.manage("lab", "start")
    client.post("/evening/", {"name": "Web Guest", "submission_key": ""})
    client.get("/registrations/")
    assert not handlers.loaded_in_this_process()


def test_lab_reset_asks_first_and_keeps_mina_patel(learner):
    register_guest(name="To Be Deleted")
    refused = learner.manage("lab", "reset")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert Registration.objects.count() == 2
    done = learner.manage("lab", "reset", "--yes")
    assert "Deleted 1 registrations; Mina Patel (R-0001) and her ticket are back" in done.stdout
    assert list(Registration.objects.values_list("pk", "name")) == [(1, "Mina Patel")]
    assert register_guest(name="Next Guest").code == "R-0002"  # the lab's outputs hold again
    assert learner.worker().strip().startswith("Received R-0002")


def test_lab_check_prints_each_check_as_it_is_decided(learner):
    """The first verdict reaches the terminal while verify_handler (lab
    check's child) is still running the later scenarios, not all at the end."""
    assert learner.manage("lab", "start").returncode == 0
    check = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "lab", "check"],
        env={**learner.env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        lines = []
        for line in check.stdout:
            lines.append(line)
            if line.startswith(("PASS  handler", "FAIL  handler")):
                children = Path(f"/proc/{check.pid}/task/{check.pid}/children").read_text().split()
                assert children, "the first verdict came only after verify_handler had finished:\n" + "".join(lines)
                break
        else:
            raise AssertionError("no verdict line:\n" + "".join(lines))
        rest = check.stdout.read()
    finally:
        check.wait(180)
    assert "checks failed" in rest  # the starting handler: the later scenarios still ran and graded it


def test_a_serving_worker_interrupted_at_a_pause_is_reported_stopped(learner):
    """Ctrl+C at a checkpoint of `worker --serve`: status lists it stopped at
    once, not running until its report goes stale."""
    registration = register_guest(name="Normal guest")
    worker = learner.workers.start("--serve", "--pause", "after-commit")
    worker.wait_for(f"Received {registration.code} redelivered=")
    worker.wait_for("Paused after-commit.")
    worker.signal(signal.SIGINT)  # Ctrl+C
    status, output = worker.finish()
    assert status == 130, output
    shown = learner.manage("status").stdout
    assert "one silent for 30 s is gone" in shown, shown
    line = next(line for line in shown.splitlines() if f":{worker.proc.pid}  " in line)
    assert " stopped " in line, shown


def test_lab_check_passes_for_the_lessons_path_alone(learner):
    """The lesson's guests only (no optional detour): lab check grades
    outcomes — one downloadable ticket each — not the detours' guest names."""
    started = learner.manage("lab", "start", "--step", "3")
    assert started.returncode == 0, started.stderr
    assert "Next: step 3 of docs/lab.md (in Russian: docs/lab.ru.md)." in started.stdout
    assert handlers.handler_file().read_text() == lab.STEP_FILES[3].read_text()
    made = [register_guest(name=name) for name in lab.LESSON_GUESTS]
    assert "Drained 4 deliveries" in learner.worker("--drain")
    status, output = learner.check()
    assert status == 0, output
    line = next(line for line in output.splitlines() if "your registrations" in line)
    assert line == f"PASS  your registrations: {made[0].code} to {made[-1].code}: one downloadable ticket each", line


def test_a_worker_interrupted_as_soon_as_it_says_paused_is_in_status(learner):
    """A learner quick on Ctrl+C: the moment `Paused before-write.` is on the
    screen the worker has reported itself, so status lists it (stopped, with
    its pause) however soon the key comes."""
    registration = register_guest(name="Retry guest")
    worker = learner.workers.start("--pause", "before-write")
    worker.wait_for(f"Received {registration.code} redelivered=False")
    worker.wait_for("Paused before-write.")
    worker.signal(signal.SIGINT)  # Ctrl+C, at once
    status, output = worker.finish()
    assert status == 130, output
    shown = learner.manage("status").stdout
    lines = [line for line in shown.splitlines() if f":{worker.proc.pid}  " in line]
    assert lines, "the interrupted worker is not in status's Workers block:\n" + shown
    assert " stopped " in lines[0] and "pauses before-write" in lines[0], shown
