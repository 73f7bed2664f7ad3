"""The tasks demo as a newcomer runs it: a fresh copy of the checkout, a clean
environment, the two commands of examples/tasks_demo/README.md, and what the
second prints is what the README shows."""

import os
import re
import signal
import subprocess
import threading
import time

import pytest

from tests.checkout import clean_env, copy_checkout
from tests.conftest import ROOT, TRANSPORT, free_port

pytestmark = pytest.mark.broker

README = ROOT / "examples" / "tasks_demo" / "README.md"


def readme_output() -> list[str]:
    """The indented block after "prints what became of them" in the demo's README."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "prints what became of them" in line) + 2
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


def test_the_two_commands_of_the_readme_run_the_demo_in_a_fresh_checkout(tmp_path):
    if os.environ.get("DATABASE_URL"):
        # A newcomer's clean environment has no DATABASE_URL: the demo runs on its own SQLite file whatever
        # the leg's database, so the PostgreSQL leg would only repeat the SQLite leg's run (minutes).
        pytest.skip("the demo runs on its own SQLite file; bin/test runs this in the SQLite and Redis legs")
    checkout = copy_checkout(tmp_path / "checkout")
    broker = "redis" if TRANSPORT == "redis" else "rabbitmq"
    env = clean_env(NIGHTJAR_BROKER_PORT=str(free_port(rabbitmq=broker == "rabbitmq")))
    if broker == "redis":
        env["NIGHTJAR_BROKER"] = "redis"
    run = subprocess.Popen(
        ["examples/tasks_demo/run"],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in run.stdout:
            output.append(line)
            if line.startswith("In another terminal:"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert ready.wait(300) and run.poll() is None, "run did not start:\n" + "".join(output)

        # The second terminal: nothing exported, the command as the README writes it.
        def second_terminal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
            command = [".venv/bin/python", "examples/tasks_demo/manage.py", *args]
            return subprocess.run(
                command, cwd=checkout, env=clean_env(), capture_output=True, text=True, timeout=timeout
            )

        demo = second_terminal("demo", timeout=300)
        assert demo.returncode == 0, demo.stdout + demo.stderr + "".join(output)
        assert demo.stdout.splitlines() == readme_output()
        parked = second_terminal("nightjar_parked", "--channel", "tasks")
        assert parked.returncode == 0, parked.stdout + parked.stderr
        assert "demo.tasks.divide raised ZeroDivisionError: division by zero" in parked.stdout, parked.stdout
        # The queue's counts as the broker gives them (RabbitMQ's unacknowledged from the management API
        # that run's node has: "unknown" while its statistics, a few seconds behind, lag what is true now).
        counted, deadline = None, time.monotonic() + 60
        while counted is None and time.monotonic() < deadline:
            status = second_terminal("nightjar_tasks_status")
            counted = re.search(r"^Queue \S+: \d+ ready, \d+ unacknowledged", status.stdout, re.M)
            time.sleep(0 if counted else 2)
        assert counted, status.stdout
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGINT)  # Ctrl+C in its terminal
            try:
                run.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
                # Its broker runs in a session of its own: stopped as the run would have.
                folder = f"examples/tasks_demo/.run/{broker}"
                subprocess.run([f"bin/{broker}-node", "stop", folder], cwd=checkout, capture_output=True)
        reader.join(10)
    assert "Stopped." in "".join(output), "".join(output)
    assert not (checkout / "examples" / "tasks_demo" / ".run" / "local.env").exists()
