"""Test set-up: the three tiers, a real, throwaway broker for the tiers that
need one — a RabbitMQ node, or a redis-server with NIGHTJAR_TEST_TRANSPORT=redis
(unless NIGHTJAR_BROKER_URL is given) — a fresh queue per test, and helpers to
run the worker as a real process against the test database.

Every test is in exactly one tier, by its module's `pytestmark` or its own
decorator (`@pytest.mark.fast`); a test in none, or in two, is a collection error:
- fast: no broker, no subprocess. The in-memory transport
  (nightjar_delivery/transport/memory.py) stands in for the broker; starting any
  subprocess fails the test, and a fast test that asks for a broker fixture
  (rabbit, worker_env, workers, site) is a collection error. `bin/test --quick`.
- broker: the real broker, started lazily by the first test that needs it;
  real worker processes, crash windows, hostile bodies.
- system: gunicorn, Chromium, the cluster and partition tests, soaks.

Across the tiers, `postgres` marks a test whose promise rests on what the
database does (transactions, locks, rollbacks, stored bytes): bin/test's
PostgreSQL leg runs those and the fast tier; `amqp_only` one that proves
what only RabbitMQ has, `transport_free` one whose promise is not the
broker's (the door, the site's start-up): both left out of the Redis leg;
`broker_service` one that stops or freezes the broker as a service of its own
(`rabbit.down()`, `rabbit.frozen()`): with `amqp_only`, no meaning on the
database transport (there the queue is the database), which fails both.

A node that cannot start is a failure, never a skip: every guarantee Nightjar
makes is proven against the real broker — the in-memory transport proves none.
"""

import contextlib
import gc
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from devtools import web
from devtools.mailserver import MailServer
from devtools.ports import free_port
from nightjar_delivery import transport
from nightjar_delivery.transport import memory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """bin/test runs its lanes side by side: each names a SQLite test database of its own
    (NIGHTJAR_TEST_DATABASE, a path); unset, nightjar/settings.py's test-db.sqlite3."""
    name = os.environ.get("NIGHTJAR_TEST_DATABASE")
    if name and settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        settings.DATABASES["default"]["TEST"]["NAME"] = name


# Which transport this run proves: bin/test runs the suite once per transport.
# database: the queue in the test database itself (db://default), no broker to start.
TRANSPORT = os.environ.get("NIGHTJAR_TEST_TRANSPORT", "amqp")
if TRANSPORT not in ("amqp", "redis", "database"):
    raise RuntimeError(f"NIGHTJAR_TEST_TRANSPORT must be amqp, redis or database, not {TRANSPORT!r}.")


class BrokerNode:
    """The broker the tests use (a RabbitMQ node, or a redis-server); `down()`
    takes it away for a while, `frozen()` stops its process."""

    def __init__(self, url: str, folder: Path | None, management_url: str = "", port: int = 0) -> None:
        self.url = url
        self.folder = folder
        self.management_url = management_url
        self.port = port

    def ctl(self, *args: str) -> None:
        subprocess.run(
            [ROOT / "bin" / "rabbitmq-node", "ctl", str(self.folder), *args], check=True, capture_output=True
        )

    def stop_app(self) -> None:
        if self.folder is None:
            # Not our node: make it unreachable for this process instead.
            settings.NIGHTJAR_BROKER_URL = self.url.replace(urlsplit(self.url).netloc, f"127.0.0.1:{free_port()}")
        elif TRANSPORT == "redis":
            subprocess.run([ROOT / "bin" / "redis-node", "stop", str(self.folder)], check=True, capture_output=True)
        else:
            self.ctl("stop_app")
        transport.reset()

    def start_app(self) -> None:
        if self.folder is None:
            settings.NIGHTJAR_BROKER_URL = self.url
        elif TRANSPORT == "redis":
            start = [ROOT / "bin" / "redis-node", "start", str(self.folder), str(self.port)]
            subprocess.run(start, check=True, capture_output=True)
        else:
            self.ctl("start_app")
            self.ctl("await_startup")
        transport.reset()

    @contextlib.contextmanager
    def down(self):
        self.stop_app()
        try:
            yield
        finally:
            self.start_app()

    def own_node(self) -> Path:
        if self.folder is None:
            pytest.fail("This test freezes or alarms the broker: it needs the node the tests start, not a given URL.")
        return self.folder

    def pid(self) -> int:
        pidfile = "redis.pid" if TRANSPORT == "redis" else "node.pid"
        return int((self.own_node() / pidfile).read_text().strip())

    @contextlib.contextmanager
    def frozen(self):
        """SIGSTOP the broker's process: it accepts TCP (the kernel does) and answers nothing."""
        pid = self.pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def memory_alarm(self):
        """A real resource alarm: RabbitMQ blocks every publishing connection."""
        self.own_node()
        self.ctl("set_vm_memory_high_watermark", "0.000001")
        try:
            yield
        finally:
            self.ctl("set_vm_memory_high_watermark", "0.4")


TIERS = ("fast", "broker", "system")
# What a fast test may not ask for: each starts a broker or a process.
NOT_FAST = ("rabbit", "worker_env", "workers", "site")


def tier(item) -> str:
    return next(marker.name for marker in item.iter_markers() if marker.name in TIERS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test in exactly one tier, and no fast test with a broker fixture
    (first, before -m deselects anything: a wrong test fails every run)."""
    wrong = []
    for item in items:
        tiers = sorted({marker.name for marker in item.iter_markers() if marker.name in TIERS})
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: in {' and '.join(tiers) or 'no tier'} (mark it fast, broker or system)")
        elif tiers == ["fast"] and (needs := [name for name in NOT_FAST if name in item.fixturenames]):
            wrong.append(f"{item.nodeid}: a fast test that asks for {', '.join(needs)} (mark it broker)")
        elif tiers == ["fast"] and item.get_closest_marker("amqp_only"):
            wrong.append(f"{item.nodeid}: fast and amqp_only (what only RabbitMQ has needs RabbitMQ: mark it broker)")
    if wrong:
        raise pytest.UsageError("Tests in the wrong tier (see tests/conftest.py):\n  " + "\n  ".join(wrong))


def pytest_runtest_setup(item):
    """A RabbitMQ-only test in a Redis run fails, never skips silently:
    bin/test deselects them by marker (-m "not amqp_only")."""
    if TRANSPORT == "redis" and item.get_closest_marker("amqp_only"):
        pytest.fail("A RabbitMQ-only test in a Redis run: deselect it with -m 'not amqp_only'.", pytrace=False)
    if TRANSPORT == "database" and (
        marker := item.get_closest_marker("amqp_only") or item.get_closest_marker("broker_service")
    ):
        pytest.fail(
            f"A {marker.name} test on the database transport (no broker to stop or to publish to):"
            " deselect it with -m 'not amqp_only and not broker_service'.",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def rabbit(tmp_path_factory) -> BrokerNode:
    """The test run's broker: RabbitMQ, or redis-server with NIGHTJAR_TEST_TRANSPORT=redis."""
    given = os.environ.get("NIGHTJAR_BROKER_URL") or os.environ.get("RABBITMQ_URL")
    if given:
        yield BrokerNode(given, None, os.environ.get("RABBITMQ_MANAGEMENT_URL", ""))
        return
    if TRANSPORT == "database":
        yield BrokerNode("db://default", None)
        return
    folder = tmp_path_factory.mktemp(TRANSPORT)
    if TRANSPORT == "redis":
        port = free_port()
        command, management_url = [ROOT / "bin" / "redis-node", "start", str(folder), str(port)], ""
    else:
        port = free_port(rabbitmq=True)
        command = [ROOT / "bin" / "rabbitmq-node", "start", str(folder), str(port)]
        management_url = f"http://127.0.0.1:{port + 10000}/"
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"The test broker ({TRANSPORT}) did not start:\n{result.stderr}", pytrace=False)
    node = BrokerNode(result.stdout.strip(), folder, management_url, port)
    try:
        yield node
    finally:
        stop = "redis-node" if TRANSPORT == "redis" else "rabbitmq-node"
        subprocess.run([ROOT / "bin" / stop, "stop", str(folder)], capture_output=True)


@pytest.fixture(scope="session", autouse=True)
def no_database_session_outlives_the_tests(django_db_setup, django_db_blocker):
    """On PostgreSQL, after the last test: no other session may still be
    connected to the test database (the run could not drop it, and a session
    left open is a connection some code forgot). Processes the tests ended a
    moment ago get a few seconds to go; then the run fails, naming what is left."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock():
        deadline = time.monotonic() + 10
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid, backend_start, state, left(query, 200) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                left = cursor.fetchall()
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    if left:
        sessions = "\n".join(
            f"  pid {pid}, since {since:%H:%M:%S}, {state}: {query}" for pid, since, state, query in left
        )
        pytest.fail(f"{len(left)} database session(s) outlived the tests:\n{sessions}", pytrace=False)


class NoSubprocess(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        pytest.fail(f"A fast test started a process ({args!r}): mark it broker or system.", pytrace=False)


@pytest.fixture(autouse=True)
def test_settings(settings, request, monkeypatch):
    """A queue of its own per test, so no test sees another's deliveries; the
    real broker for the broker and system tiers (started at the first such
    test), the in-memory one and no subprocess for the fast tier."""
    if tier(request.node) == "fast":
        memory.forget()
        monkeypatch.setattr(subprocess, "Popen", NoSubprocess)
        settings.NIGHTJAR_BROKER_URL = "memory://fast-tier"
        settings.RABBITMQ_MANAGEMENT_URL = ""
    else:
        rabbit = request.getfixturevalue("rabbit")
        settings.NIGHTJAR_BROKER_URL = rabbit.url
        settings.RABBITMQ_MANAGEMENT_URL = rabbit.management_url
    settings.NIGHTJAR_QUEUE = f"test-{uuid.uuid4().hex[:12]}"
    settings.NIGHTJAR_LAB = False
    settings.SECURE_SSL_REDIRECT = False  # the test client speaks plain HTTP
    settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE = 0  # the rate-limit test turns it on
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    transport.reset()
    yield settings
    transport.reset()
    gc.unfreeze()  # a worker run in this process froze what existed (nightjar_worker): the next test collects all


def database_url() -> str:
    """The test database, as a URL a worker subprocess can open."""
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    return f"postgres://{params['USER']}:{params['PASSWORD']}@{params['HOST']}:{params['PORT']}/{params['NAME']}"


@pytest.fixture
def worker_env(test_settings) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "nightjar.settings",
        "DATABASE_URL": database_url(),
        "NIGHTJAR_BROKER_URL": test_settings.NIGHTJAR_BROKER_URL,
        "RABBITMQ_MANAGEMENT_URL": test_settings.RABBITMQ_MANAGEMENT_URL,
        "NIGHTJAR_QUEUE": test_settings.NIGHTJAR_QUEUE,
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "NIGHTJAR_REGISTRATIONS_PER_MINUTE": "0",
        # Never what a bin/run in this checkout wrote (nightjar/localrun.py).
        "NIGHTJAR_RUN_FILE": "",
    }
    return env


def _ctrl_c_as_from_a_terminal() -> None:
    """Every process the tests start gets Ctrl+C (SIGINT) as a terminal
    delivers it. A test run started in the background (`cmd &` in a script,
    nohup) has SIGINT ignored, and an ignored signal stays ignored across
    fork and exec: Python then never raises KeyboardInterrupt, and every
    Ctrl+C the tests send (to a worker, to bin/run, in the guide's terminal)
    would be lost on the way rather than on the program. Restored here,
    once, in the test process itself, so no launch can forget it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


_ctrl_c_as_from_a_terminal()


class Workers:
    """Run `manage.py worker` as real processes of their own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.running: list[subprocess.Popen] = []

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(ROOT / "manage.py"), "worker", *args]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*args), env=self.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )

    def start(self, *args: str, env: dict[str, str] | None = None) -> "Process":
        proc = subprocess.Popen(
            self.command(*args),
            env=env or self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.running.append(proc)
        return Process(proc)

    def stop_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Process:
    """A started worker: read its output line by line, poke it, wait for it.
    A thread reads the output, so waiting never depends on pipe buffering."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """Read output until a line containing text; fail with all output if it never comes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                output = "\n".join(self.lines)
                raise AssertionError(f"Worker never printed {text!r} (exit {self.proc.poll()}). Output:\n{output}")
            self.lines.append(line)
            if text in line:
                return line

    def read_so_far(self) -> list[str]:
        """Take every line printed until now without waiting (kept in .lines),
        so that the next wait_for answers only what comes after."""
        taken = []
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if line is None:  # the end of the output: leave it for wait_for
                self._queue.put(None)
                return taken
            self.lines.append(line)
            taken.append(line)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        """Wait for the process to end; its exit status and all its output."""
        status = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return status, "\n".join(self.lines)


def start_gunicorn(env: dict[str, str], *args: str, stdout=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """gunicorn (these arguments) on a free loopback port (devtools.web);
    returns it and its URL once it answers, or fails the test with
    gunicorn's own words."""
    try:
        return web.start_gunicorn(env, *args, stdout=stdout)
    except web.GunicornDidNotStart as error:
        pytest.fail(str(error))


@pytest.fixture
def site(worker_env):
    """gunicorn serving the test database; DEBUG so static files come straight from static/."""
    env = {**worker_env, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    server, url = start_gunicorn(env, "--workers", "1")
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def staff(client):
    """The test client, signed in as a superuser of the admin."""
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("desk", "desk@example.org", "correct horse battery staple")
    client.force_login(user)
    return client


@pytest.fixture
def workers(worker_env):
    pool = Workers(worker_env)
    yield pool
    pool.stop_all()


@pytest.fixture
def smtp(settings):
    """A real SMTP server (aiosmtpd, a thread of this process) that the mail
    sender is pointed at, here and in worker_env's processes; retries due at once."""
    with MailServer() as server:
        settings.NIGHTJAR_SMTP_HOST, settings.NIGHTJAR_SMTP_PORT = server.host, server.port
        settings.NIGHTJAR_SMTP_TIMEOUT = 2.0
        settings.NIGHTJAR_MAIL_RETRY_SECONDS = 0
        settings.NIGHTJAR_SITE_URL = "https://nightjar.example.org"
        yield server
