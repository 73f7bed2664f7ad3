"""verify_handler's scenarios: run a handler, unmodified, in real worker
processes that are killed at its checkpoints, against a disposable SQLite
database and a queue of its own, and check what RabbitMQ and the database
hold afterwards.

The scenarios run in a child process whose DATABASE_URL and NIGHTJAR_QUEUE
point at the disposable pair, so no line here can reach the real data.
"""

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from classroom import verdicts
from classroom.verdicts import Verdict
from nightjar_delivery import transport
from tickets.handlers import shown
from tickets.models import Completion
from tickets.services.registrations import publish_registration, register_guest

ROOT = Path(settings.BASE_DIR)
WAIT_SECONDS = 30


class ScenarioFailed(Exception):
    pass


def isolated_env(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{folder / 'verify.sqlite3'}",
        "NIGHTJAR_QUEUE": f"nightjar.verify-{uuid.uuid4().hex[:10]}",
        "PYTHONUNBUFFERED": "1",
    }


def run_isolated(
    handler: str, *, say: Callable[[str], None], decided: Callable[[Verdict], None] = lambda verdict: None
) -> int:
    """Run every scenario in a child process on a disposable database and
    queue; `say` gets each line it prints, `decided` each verdict (as data,
    the moment the child has it); return its exit status."""
    with tempfile.TemporaryDirectory(prefix="nightjar-verify-") as folder:
        env = isolated_env(Path(folder))
        written = Path(folder) / "verdicts.jsonl"
        written.touch()
        reader = verdicts.Reader(written)
        command = [sys.executable, str(ROOT / "manage.py"), "verify_handler", "--handler", handler, "--inside"]
        command += ["--verdicts", str(written)]
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in child.stdout:
            say(line.rstrip("\n"))
            for verdict in reader.new():  # the child writes a verdict before it prints its line
                decided(verdict)
        status = child.wait()
        for verdict in reader.new():
            decided(verdict)
        return status


class Scenarios:
    """Runs inside the child process: the database and queue are disposable."""

    def __init__(self, handler: str, say: Callable[[str], None], record: Callable[[Verdict], None]) -> None:
        self.handler = handler
        self.say = say
        self.record = record

    def worker(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, str(ROOT / "manage.py"), "worker", "--handler", self.handler, *args]
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def run_worker(self, *args: str) -> str:
        proc = self.worker(*args)
        output, _ = proc.communicate(timeout=WAIT_SECONDS)
        if proc.returncode != 0:
            raise ScenarioFailed(f"the worker exited {proc.returncode}: {output.strip().splitlines()[-1:]}")
        return output

    def kill_at(self, checkpoint: str) -> None:
        """Start a worker paused at the checkpoint, then SIGKILL it there."""
        proc = self.worker("--pause", checkpoint)
        seen = []
        for line in proc.stdout:
            seen.append(line.strip())
            if line.strip() == f"Paused {checkpoint}.":
                break
        else:
            proc.wait()
            raise ScenarioFailed(f"the handler never reached checkpoint {checkpoint} (output: {' / '.join(seen)})")
        proc.kill()
        proc.wait()

    @staticmethod
    def counts(registration) -> tuple[bool, int]:
        return Completion.objects.filter(registration=registration).exists(), registration.tickets.count()

    def register(self, name: str = "Verify Guest"):
        return register_guest(name=name)

    def expect_redelivery(self, registration, why_needed: str) -> None:
        output = self.run_worker()
        if f"Received {registration.code} redelivered=True" not in output:
            raise ScenarioFailed(f"{transport.name()} had nothing to redeliver: {why_needed}")

    def expect_one_ticket(self, registration, when: str) -> None:
        _, tickets = self.counts(registration)
        if tickets != 1:
            raise ScenarioFailed(f"{tickets} tickets {when}, expected exactly one")

    def expect_queue_empty(self) -> None:
        if "No ready registrations" not in self.run_worker():
            raise ScenarioFailed("a delivery was still waiting in the queue afterwards")

    # The scenarios. Each returns a one-line reason when it passes.

    def normal_run(self) -> str:
        registration = self.register()
        self.run_worker()
        self.expect_one_ticket(registration, "after one delivery")
        self.expect_queue_empty()
        return "one delivery, one ticket, acked"

    def killed_before_write(self) -> str:
        registration = self.register()
        self.kill_at("before-write")
        if self.counts(registration)[1]:
            raise ScenarioFailed("a ticket exists although the worker died before writing")
        self.expect_redelivery(registration, "the delivery was acked before the ticket was written; the ticket is lost")
        self.expect_one_ticket(registration, "after the redelivery")
        return f"killed before the write; {transport.name()} redelivered; one ticket"

    def killed_inside_transaction(self) -> str:
        registration = self.register()
        self.kill_at("inside-transaction")
        if self.counts(registration) != (False, 0):
            raise ScenarioFailed("the killed transaction left a completion key or a ticket behind")
        self.expect_redelivery(registration, "the delivery was acked before the commit; the ticket is lost")
        self.expect_one_ticket(registration, "after the redelivery")
        return "killed inside the transaction; rolled back to nothing; redelivered; one ticket"

    def killed_after_commit(self) -> str:
        registration = self.register()
        self.kill_at("after-commit")
        self.expect_one_ticket(registration, "after the commit")
        self.expect_redelivery(registration, "the delivery was acked before the commit, not after it")
        self.expect_one_ticket(registration, "after the redelivery (the repeat made another)")
        self.expect_queue_empty()
        return "killed after the commit; the redelivery made no second ticket and was acked"

    def repeated_delivery(self) -> str:
        registration = self.register()
        self.run_worker()
        # A repeat as the broker makes one (at least once), not staff's retry: retry refuses
        # a ticket without its key, and this scenario is how a handler that leaves one fails.
        publish_registration(registration)
        self.run_worker()
        self.expect_one_ticket(registration, "after a second delivery of the same registration")
        return "a second delivery of a done registration made no second ticket"

    def same_name_twice(self) -> str:
        first, second = self.register("Same name"), self.register("Same name")
        self.run_worker("--drain")
        self.expect_one_ticket(first, f"for {first.code}")
        self.expect_one_ticket(second, f"for {second.code}")
        return "two guests named 'Same name' got two tickets"

    def run_all(self) -> bool:
        call_command("migrate", verbosity=0)
        scenarios = [
            ("normal run", self.normal_run),
            ("interrupted before the write", self.killed_before_write),
            ("interrupted inside the transaction", self.killed_inside_transaction),
            ("interrupted after commit, before ack", self.killed_after_commit),
            ("the same registration delivered twice", self.repeated_delivery),
            ("two registrations with the same name", self.same_name_twice),
        ]
        results = []
        for name, scenario in scenarios:
            try:
                verdict = Verdict(name, True, scenario())
            except ScenarioFailed as failure:
                verdict = Verdict(name, False, str(failure))
            except subprocess.TimeoutExpired:
                verdict = Verdict(name, False, f"a worker did not finish within {WAIT_SECONDS} s")
            self.drain_leftovers()
            results.append(verdict)
            self.record(verdict)
            self.say(verdict.line())
        transport.delete_queues()
        passed = sum(verdict.passed for verdict in results)
        self.say(f"{passed} of {len(results)} scenarios passed with {shown(self.handler)}.")
        return passed == len(results)

    def drain_leftovers(self) -> None:
        """Each scenario starts from an empty queue, whatever the last one left."""
        proc = self.worker("--drain")
        try:
            proc.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
