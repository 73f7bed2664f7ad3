"""A fresh terminal in the checkout, with nothing exported, talks to what
bin/run started there (nightjar/localrun.py): lab mode on, the same broker,
the same database — and lab mode off again once bin/run has stopped."""

import os
import subprocess
import sys

import pytest

from nightjar import localrun
from tests.checkout import LocalRun, clean_env, copy_checkout
from tests.conftest import TRANSPORT

pytestmark = pytest.mark.system

SHOW = (
    "from django.conf import settings; "
    "print(settings.NIGHTJAR_LAB, settings.NIGHTJAR_BROKER_URL, settings.DATABASES['default']['NAME'])"
)


def fresh_terminal(checkout, *args):
    """`env -i PATH=... HOME=... LANG=...` in the checkout, as a new shell is."""
    return subprocess.run(
        [".venv/bin/python", "manage.py", *args],
        cwd=checkout,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


# bin/run's broker, each in the leg of its own transport (bin/test): not the same run twice.
@pytest.mark.parametrize("broker", ["redis" if TRANSPORT == "redis" else "rabbitmq"])
def test_a_fresh_terminal_uses_the_running_bin_run(tmp_path, broker):
    checkout = copy_checkout(tmp_path / "checkout")
    run = LocalRun(checkout, broker)
    try:
        started = run.start()
        name = {"rabbitmq": "RabbitMQ", "redis": "Redis"}[broker]
        assert f"Lab mode is on. Any new terminal in this checkout uses this run: {name} at" in started
        shown = fresh_terminal(checkout, "shell", "-c", SHOW)
        assert shown.returncode == 0, shown.stderr
        lab, url, database = shown.stdout.splitlines()[-1].split()
        assert lab == "True"
        scheme = {"rabbitmq": "amqp://", "redis": "redis://"}[broker]
        assert url.startswith(scheme) and f"127.0.0.1:{run.broker_port}/" in url, url
        assert database == str(checkout / "db.sqlite3")
        # The learner's first commands: no CommandError, the broker answers.
        first = fresh_terminal(checkout, "lab", "start")
        assert first.returncode == 0, first.stdout + first.stderr
        status = fresh_terminal(checkout, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "Mina Patel" in status.stdout or "R-0001" in status.stdout, status.stdout
        # A second bin/run in the same checkout is refused before it starts anything.
        second = subprocess.run(
            ["bin/run", "--no-worker"], cwd=checkout, env=clean_env(), capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 1
        assert f"bin/run is already running in this checkout (pid {run.process.pid})" in second.stderr
    finally:
        run.stop()
    assert not (checkout / ".run" / "local.env").exists()
    after = fresh_terminal(checkout, "shell", "-c", SHOW)
    assert after.stdout.splitlines()[-1].split()[0] == "False", after.stdout + after.stderr
    refused = fresh_terminal(checkout, "lab", "start")
    assert refused.returncode != 0
    assert "lab mode is off here, as in production" in refused.stderr


def test_the_file_of_a_bin_run_that_died_is_ignored(tmp_path, monkeypatch):
    """SIGKILLed bin/run cannot remove its file: a pid that is gone (or reused
    by another process, its start time differs) makes the file stale."""
    path = tmp_path / "local.env"
    monkeypatch.setenv("NIGHTJAR_RUN_FILE", str(path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv("NIGHTJAR_LAB", "1")
    assert localrun.main(["write", str(os.getpid())]) == 0
    environ = {"NIGHTJAR_RUN_FILE": str(path)}
    assert localrun.load(environ) is not None and environ["NIGHTJAR_LAB"] == "1"
    for pid, started in ((gone.pid, localrun.start_time(os.getpid())), (os.getpid(), "1")):
        text = path.read_text().splitlines()
        text = [f"BIN_RUN_PID={pid}" if line.startswith("BIN_RUN_PID=") else line for line in text]
        text = [f"BIN_RUN_STARTED={started}" if line.startswith("BIN_RUN_STARTED=") else line for line in text]
        path.write_text("\n".join(text))
        environ = {"NIGHTJAR_RUN_FILE": str(path)}
        assert localrun.load(environ) is None
        assert "NIGHTJAR_LAB" not in environ
    # The environment always wins over the file, and an empty NIGHTJAR_RUN_FILE reads none.
    assert localrun.run_file({"NIGHTJAR_RUN_FILE": ""}) is None
