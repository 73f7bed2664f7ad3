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


def test_bin_run_writes_the_guests_mail_where_it_says(tmp_path):
    """The issue's "Done when" on bin/run itself: a guest registers with an
    address on a full evening, another cancels, and the first finds "a seat
    is yours" and then the ticket in the folder bin/run names (its sender,
    no mail server)."""
    from devtools.guest import Guest
    from tests.helpers import until

    checkout = copy_checkout(tmp_path / "checkout")
    run = LocalRun(checkout, "redis" if TRANSPORT == "redis" else "rabbitmq")
    try:
        started = run.start()
        assert "Mail to guests is written to .run/mail/ (one .eml file per mail" in started
        seated = fresh_terminal(checkout, "seats", "--capacity", "2")  # Mina Patel (the demo) holds the first
        assert seated.returncode == 0, seated.stdout + seated.stderr
        base, pages = f"http://127.0.0.1:{run.port}", {}
        for name in ("Ada", "Bo"):
            guest = Guest(base, follow_redirects=False)
            status, _, _ = guest.register(name, headers={"Referer": base}, email=f"{name.lower()}@example.org")
            assert status == 302, status
            pages[name] = guest.location
        assert Guest(base, follow_redirects=False).cancel(pages["Ada"]) == 302  # Bo gets her seat
        worked = fresh_terminal(checkout, "worker", "--drain")  # bin/run --no-worker: by hand, as in the lab
        assert worked.returncode == 0, worked.stdout + worked.stderr
        folder = checkout / ".run" / "mail"
        names = until(
            lambda: (
                (found := sorted(path.name.rsplit("-", 1)[0] for path in folder.glob("*.eml")))
                and len(found) == 4
                and found
            ),
            what="four mails in .run/mail",
        )
        ada, bo = (page.split("/")[2] for page in (pages["Ada"], pages["Bo"]))
        assert names == sorted([f"{ada}-cancelled", f"{bo}-waiting", f"{bo}-seat", f"{bo}-ticket"])
        seat = next(folder.glob(f"{bo}-seat-*.eml")).read_text()
        assert f"Subject: A seat is yours ({bo})" in seat and f"http://127.0.0.1:{run.port}/registrations/{bo}/" in seat
    finally:
        run.stop()
