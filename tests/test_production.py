"""The production path: deploy checks, health endpoint, logs, the audit
command, and the docker-compose file (parsed, since no Docker runs here)."""

import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from devtools.ports import free_port
from nightjar.logs import JsonFormatter, MaskSecrets, mask
from nightjar_delivery import transport
from tests.conftest import ROOT
from tickets.models import Completion, Registration, Ticket

PRODUCTION_ENV = {
    "DJANGO_SECRET_KEY": "a-long-random-production-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "DJANGO_DEBUG": "0",
    "DJANGO_ALLOWED_HOSTS": "nightjar.example.org",
    "NIGHTJAR_SMTP_HOST": "mail.example.org",
    "NIGHTJAR_SITE_URL": "https://nightjar.example.org",
}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NIGHTJAR_", "RABBITMQ_"))}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], env={**clean, **env}, capture_output=True, text=True
    )


@pytest.mark.system
def test_check_deploy_reports_nothing_with_production_variables():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.system
def test_check_deploy_flags_a_missing_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W009" in result.stderr


@pytest.mark.system
def test_check_deploy_fails_when_production_would_send_guests_mail_nowhere():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k not in ("NIGHTJAR_SMTP_HOST", "NIGHTJAR_SITE_URL")}
    result = manage("check", "--deploy", env=env)
    assert result.returncode != 0
    assert "mail.E001" in result.stderr and "mail.E002" in result.stderr


@pytest.mark.system
def test_junk_in_a_setting_fails_loudly():
    result = manage("check", env={**PRODUCTION_ENV, "DJANGO_DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be 1/0, true/false, yes/no or on/off, not 'maybe'" in result.stderr


@pytest.mark.broker
@pytest.mark.postgres
@pytest.mark.django_db
def test_healthz_is_200_when_database_and_rabbitmq_answer(client, settings):
    settings.NIGHTJAR_HEALTH_CACHE_SECONDS = 0  # each answer fresh: the broker changes within the test
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", transport.name().lower(): "ok"}


@pytest.mark.broker_service
@pytest.mark.broker
@pytest.mark.django_db
def test_healthz_is_503_without_rabbitmq_and_leaks_nothing(client, rabbit, settings):
    settings.NIGHTJAR_HEALTH_CACHE_SECONDS = 0  # each answer fresh: the broker changes within the test
    with rabbit.down():
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "ok", transport.name().lower(): "unavailable"}
    assert b"amqp" not in response.content and b"guest" not in response.content


@pytest.mark.broker_service
@pytest.mark.broker
@pytest.mark.django_db
def test_liveness_stays_200_while_readiness_reports_the_broker_down(client, rabbit, settings):
    settings.NIGHTJAR_HEALTH_CACHE_SECONDS = 0  # each answer fresh: the broker changes within the test
    assert client.get("/healthz/live").status_code == 200
    assert client.get("/healthz/ready").status_code == 200
    with rabbit.down():
        live, ready = client.get("/healthz/live"), client.get("/healthz/ready")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    assert ready.status_code == 503 and ready.json()[transport.name().lower()] == "unavailable"
    assert live["Cache-Control"] == ready["Cache-Control"] == "no-store"


@pytest.mark.broker_service
@pytest.mark.broker
@pytest.mark.django_db(transaction=True)
def test_the_worker_touches_its_health_file_while_its_loop_runs_and_not_when_it_hangs(workers, tmp_path, rabbit):
    alive = tmp_path / "worker.alive"
    worker = workers.start("--serve", "--health-file", str(alive))
    worker.wait_for("Serving")

    def age() -> float:
        return time.time() - alive.stat().st_mtime

    time.sleep(1.5)
    assert age() < 1.5  # idle, still touched
    worker.signal(signal.SIGSTOP)  # hung: nothing touches it
    try:
        time.sleep(3)
        assert age() > 2.5
    finally:
        worker.signal(signal.SIGCONT)
    time.sleep(1.5)
    assert age() < 1.5
    with rabbit.down():  # reconnecting to a broker that is down is still a running loop
        worker.wait_for("unavailable; reconnecting", timeout=30)
        time.sleep(2.5)
        assert age() < 1.5


@pytest.mark.fast
def test_logs_are_json_lines_with_passwords_masked():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(MaskSecrets())
    logger = logging.getLogger("tests.masking")
    logger.addHandler(handler)
    try:
        logger.warning(
            "RabbitMQ at %s is down",
            "amqp://nightjar:s3cret-pw@rabbit:5672/%2F",
            extra={"broker": "amqp://nightjar:s3cret-pw@rabbit:5672/%2F", "attempt": 3},
        )
        try:
            raise ConnectionError("cannot reach postgres://app:s3cret-pw@db:5432/nightjar")
        except ConnectionError:
            logger.exception("Database gone")
    finally:
        logger.removeHandler(handler)
    warning, error = (json.loads(line) for line in stream.getvalue().splitlines())
    assert warning["level"] == "WARNING" and warning["logger"] == "tests.masking"
    assert warning["message"] == "RabbitMQ at amqp://nightjar:***@rabbit:5672/%2F is down"
    assert warning["broker"] == "amqp://nightjar:***@rabbit:5672/%2F" and warning["attempt"] == 3  # extra= kept
    assert datetime.fromisoformat(warning["time"]).utcoffset() == timedelta(0)  # UTC, and it says so
    assert "ConnectionError: cannot reach postgres://app:***@db:5432/nightjar" in error["exception"]
    assert "s3cret" not in stream.getvalue()


@pytest.mark.fast
def test_guest_secrets_never_reach_the_logs():
    registration_path = "/registrations/R-0042/Zx9_secret-Value/ticket/download/"
    assert mask(f"GET {registration_path} 200") == "GET /registrations/R-0042/***/ticket/download/ 200"
    assert mask("/registrations/R-7/abc?x=1") == "/registrations/R-7/***?x=1"


@pytest.mark.fast
def test_docker_compose_describes_every_service_with_what_it_needs():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"rabbitmq", "postgres", "migrate", "web", "worker", "mail"}
    assert services["rabbitmq"]["image"].startswith("rabbitmq:") and "management" in services["rabbitmq"]["image"]
    assert services["postgres"]["image"].startswith("postgres:")
    for name in ("rabbitmq", "postgres", "web"):
        assert "healthcheck" in services[name], name
    for name in ("migrate", "web", "worker"):
        env = services[name]["environment"]
        assert {"DATABASE_URL", "RABBITMQ_URL", "DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS"} <= set(env), name
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:" in env["DATABASE_URL"]
        assert "@rabbitmq:" in env["RABBITMQ_URL"]
        assert services[name]["build"] == "."
    # Migrations run once, before the web service and the worker start.
    assert "migrate" in " ".join(services["migrate"]["command"])
    for name in ("web", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert services["worker"]["command"][:4] == ["python", "manage.py", "worker", "--serve"]
    assert services["worker"]["stop_signal"] == "SIGTERM"
    assert services["mail"]["command"][:4] == ["python", "manage.py", "send_mail", "--serve"]
    assert services["mail"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "requirements.txt" in dockerfile and "collectstatic" in dockerfile


@pytest.mark.fast
@pytest.mark.django_db
def test_audit_passes_on_a_clean_database():
    registration = Registration.objects.create(name="Clean")
    Completion.objects.create(registration=registration)
    Ticket.objects.create(registration=registration, name="Clean")
    out = io.StringIO()
    call_command("audit", stdout=out)
    assert "Audit passed: 1 registrations" in out.getvalue()


@pytest.mark.fast
@pytest.mark.django_db
def test_audit_prints_every_kind_of_violation_and_fails():
    doubled = Registration.objects.create(name="Doubled")
    Completion.objects.create(registration=doubled)
    Ticket.objects.create(registration=doubled, name="Doubled")
    Ticket.objects.create(registration=doubled, name="Doubled")
    keyless = Registration.objects.create(name="Keyless")
    Ticket.objects.create(registration=keyless, name="Keyless")
    ticketless = Registration.objects.create(name="Ticketless")
    Completion.objects.create(registration=ticketless)
    renamed = Registration.objects.create(name="Right")
    Completion.objects.create(registration=renamed)
    Ticket.objects.create(registration=renamed, name="Wrong")
    stale = Registration.objects.create(name="Stale")
    Registration.objects.filter(pk=stale.pk).update(created=stale.created.replace(year=2020))
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit", stdout=out)
    assert failed.value.returncode == 1
    report = out.getvalue()
    assert f"VIOLATION more than one ticket: {doubled.code}" in report
    assert f"VIOLATION ticket without its key: {keyless.code}" in report
    assert f"VIOLATION completion key without a ticket: {ticketless.code}" in report
    assert f"VIOLATION ticket name differs from the registration: {renamed.code}" in report
    assert f"VIOLATION pending for more than 300 s: {stale.code}" in report


@pytest.mark.system
def test_a_broken_broker_url_and_lab_mode_in_production_are_system_check_findings():
    broken = manage("check", env={**PRODUCTION_ENV, "RABBITMQ_URL": "http://nowhere"})
    assert broken.returncode != 0
    assert "nightjar.E001" in broken.stderr
    lab = manage("check", "--deploy", "--fail-level", "WARNING", env={**PRODUCTION_ENV, "NIGHTJAR_LAB": "1"})
    assert lab.returncode != 0
    assert "nightjar.W001" in lab.stderr


@pytest.mark.system
def test_the_systemd_units_are_valid_and_run_what_the_readme_says(tmp_path):
    """systemd's own checker on the unit files, pointed at this checkout."""
    units = []
    for name, instance in (
        ("nightjar-web.service", "nightjar-web.service"),
        ("nightjar-worker@.service", "nightjar-worker@1.service"),
        ("nightjar-tasks-worker@.service", "nightjar-tasks-worker@1.service"),
        ("nightjar-mail.service", "nightjar-mail.service"),
        ("nightjar-tasks-scheduler.service", "nightjar-tasks-scheduler.service"),
    ):
        text = (ROOT / "deploy" / name).read_text()
        assert "/srv/nightjar" in text
        (tmp_path / instance).write_text(text.replace("/srv/nightjar", str(ROOT)))
        units.append(str(tmp_path / instance))
    result = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    worker = (ROOT / "deploy" / "nightjar-worker@.service").read_text()
    assert "manage.py worker --serve" in worker and "KillSignal=SIGTERM" in worker
    assert "NIGHTJAR_CONSUMER_NAME=%H-worker-%i" in worker
    # A task body may end its worker with status 0 (os._exit(0)): restarted on any exit.
    tasks_worker = (ROOT / "deploy" / "nightjar-tasks-worker@.service").read_text()
    assert "manage.py worker --channel tasks --serve" in tasks_worker and "\nRestart=always\n" in tasks_worker
    assert "manage.py send_mail --serve" in (ROOT / "deploy" / "nightjar-mail.service").read_text()
    assert "manage.py nightjar_scheduler\n" in (ROOT / "deploy" / "nightjar-tasks-scheduler.service").read_text()


@pytest.mark.system
def test_the_multi_node_broker_url_is_checked():
    both = "amqp://guest:guest@127.0.0.1:5672/%2F;redis://127.0.0.1:6379/0"
    result = manage("check", env={**PRODUCTION_ENV, "NIGHTJAR_BROKER_URL": both})
    assert result.returncode != 0 and "nightjar.E004" in result.stderr
    cluster = "amqp://guest:guest@127.0.0.1:5672/%2F;amqp://guest:guest@127.0.0.1:5673/%2F"
    assert manage("check", env={**PRODUCTION_ENV, "NIGHTJAR_BROKER_URL": cluster}).returncode == 0


def still_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.broker
@pytest.mark.amqp_only
def test_a_rabbitmq_node_from_bin_rabbitmq_node_stops_with_its_own_epmd(tmp_path):
    """bin/rabbitmq-node gives its node an epmd of its own (PORT+20001, started
    and stopped by pid): the node is not registered with the machine's shared
    epmd on 4369, and `stop` (even twice; the first with start's own
    arguments, the port too) leaves nothing running."""
    script, folder = ROOT / "bin" / "rabbitmq-node", tmp_path / "node"
    port = free_port(rabbitmq=True)
    try:
        started = subprocess.run([script, "start", folder, str(port)], capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        management = subprocess.run([script, "management-url", folder], capture_output=True, text=True, timeout=30)
        assert management.stdout.strip() == f"http://127.0.0.1:{port + 10000}/"
        epmd, node = (int((folder / name).read_text()) for name in ("epmd.pid", "node.pid"))
        names = subprocess.run(["epmd", "-port", str(port + 20001), "-names"], capture_output=True, text=True)
        name = re.search(r"name (nightjar-\d+)", names.stdout).group(1)  # registered with its own epmd
        assert f"{port + 20001}" in Path(f"/proc/{epmd}/cmdline").read_text()
        shared = subprocess.run(["epmd", "-names"], capture_output=True, text=True)  # 4369, if one runs
        assert name not in shared.stdout
    finally:
        stopped = subprocess.run([script, "stop", folder, str(port)], capture_output=True, text=True, timeout=120)
        subprocess.run([script, "stop", folder], capture_output=True, timeout=120)  # twice: starts nothing
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while still_running(epmd) or still_running(node):
        assert time.monotonic() < deadline, "the node or its epmd still runs after stop"
        time.sleep(0.2)
    for closed in (port, port + 20001):  # nothing answers there any more
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", closed)) != 0, f"something still listens on {closed}"


@pytest.mark.broker
@pytest.mark.transport_free
def test_redis_node_and_postgres_cluster_stop_when_given_start_s_own_arguments(tmp_path):
    """`stop DIR PORT` (start's command with stop for start, as an operator
    retypes it) stops what `start DIR PORT` started, as `stop DIR` does."""
    # (PostgreSQL runs as the postgres user, who cannot enter pytest's private tmp_path.)
    pg_folder = Path(tempfile.mkdtemp(prefix="nightjar-pg."))
    try:
        for script, folder in (("redis-node", tmp_path / "redis"), ("postgres-cluster", pg_folder)):
            command, port = [ROOT / "bin" / script], free_port()
            started = subprocess.run(
                [*command, "start", folder, str(port)], capture_output=True, text=True, timeout=120
            )
            try:
                assert started.returncode == 0, started.stderr
                socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it listens
            finally:
                stopped = subprocess.run(
                    [*command, "stop", folder, str(port)], capture_output=True, text=True, timeout=120
                )
            assert stopped.returncode == 0, stopped.stderr
            with socket.socket() as probe:
                assert probe.connect_ex(("127.0.0.1", port)) != 0, f"{script} still listens on {port} after stop"
    finally:
        subprocess.run([ROOT / "bin" / "postgres-cluster", "stop", pg_folder], capture_output=True, timeout=120)
        shutil.rmtree(pg_folder, ignore_errors=True)


@pytest.mark.system
@pytest.mark.transport_free
def test_a_soak_and_the_benchmark_collect_static_files_outside_the_checkout(tmp_path):
    """bin/test's lanes run in one checkout at once. A soak's collectstatic
    deleted and rewrote the checkout's hashed files while another lane's site
    listed them (whitenoise: FileNotFoundError in two fast tests, CI at 3913325):
    NIGHTJAR_STATIC_ROOT gives each its own folder."""
    static = tmp_path / "static"
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env={**os.environ, "NIGHTJAR_STATIC_ROOT": str(static)},
        check=True,
        timeout=120,
    )
    manifest = json.loads((static / "staticfiles.json").read_text())
    assert (static / manifest["paths"]["nightjar.css"]).is_file()

    sys.path.insert(0, str(ROOT / "bin"))
    try:
        import chaos_soak
    finally:
        sys.path.remove(str(ROOT / "bin"))
    soak = chaos_soak.Soak(chaos_soak.arguments([]))
    try:
        assert Path(soak.env["NIGHTJAR_STATIC_ROOT"]).parent == soak.folder
    finally:
        shutil.rmtree(soak.folder)
    bench = (ROOT / "bin" / "bench" / "__main__.py").read_text()
    assert 'NIGHTJAR_STATIC_ROOT=str(folder / "static")' in bench
