"""Hostile traffic (issue 23): the work of one request stays bounded whatever a
guest sends, no guest secret reaches a log line, production refuses a public
key, and proxy headers count only from the proxy."""

import base64
import contextlib
import http.client
import http.server
import io
import os
import signal
import subprocess
import sys
import threading
import types
import unicodedata

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core import signing
from django.db import DatabaseError, connection
from django.test import Client

from devtools.guest import Guest
from nightjar import keys
from nightjar_delivery.worker import Worker
from tests.conftest import ROOT, start_gunicorn
from tickets import contract, views
from tickets.handler import handle
from tickets.models import Registration, Ticket
from tickets.services.registrations import register_guest

ZALGO = "a" + "\u0301" * 5000  # past any name; 1.3 million of these took a worker down


class CountingUnicodedata(types.SimpleNamespace):
    """unicodedata as contract.py uses it, counting the characters it looks at."""

    def __init__(self) -> None:
        super().__init__(looked_at=0)

    def category(self, ch):
        self.looked_at += 1
        return unicodedata.category(ch)

    def normalize(self, form, text):
        self.looked_at += len(text)
        return unicodedata.normalize(form, text)


@pytest.fixture
def counted(monkeypatch):
    counter = CountingUnicodedata()
    monkeypatch.setattr(contract, "unicodedata", counter)
    return counter


@pytest.mark.fast
def test_an_oversize_name_is_refused_before_any_per_character_work(counted):
    with pytest.raises(contract.ContractError, match="at most 100 characters"):
        contract.clean_name(ZALGO)
    assert counted.looked_at == 0


@pytest.mark.fast
def test_the_characters_looked_at_grow_linearly_with_the_name(counted):
    def looked_at(text: str) -> int:
        counted.looked_at = 0
        contract.clusters(text)
        return counted.looked_at

    for unit in ("a\u0301", "\U0001f469\u200d", "e\u0301\u0323 "):
        assert looked_at(unit * 1000) <= 10 * looked_at(unit * 100) + 10
        assert looked_at(unit * 1000) <= len(unit * 1000)


@pytest.mark.fast
def test_one_letter_with_299_combining_marks_is_not_one_character():
    name = "a" + "\u0301" * 299
    assert contract.name_length(name) > contract.MAX_NAME_LENGTH
    with pytest.raises(contract.ContractError, match="at most 100 characters"):
        contract.clean_name(name)


@pytest.mark.fast
@pytest.mark.parametrize(
    "name",
    [
        "Nguy\u1ec5n Th\u1ecb Minh",  # two marks on one letter
        "Ana \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # a family: seven code points
        "e\u0301\u0323\u0302 Ko",
    ],
)
def test_real_names_with_marks_and_joiners_still_count_as_typed(name):
    assert contract.name_length(unicodedata.normalize("NFC", name)) == len(contract.clusters(name))
    assert contract.clean_name(name)


@pytest.mark.fast
@pytest.mark.django_db
def test_a_form_post_larger_than_any_name_is_refused_unread():
    response = Client().post("/evening/", {"name": "a" + "\u0301" * 100_000, "submission_key": "k"})
    assert response.status_code == 400
    assert not Registration.objects.exists()


@pytest.mark.fast
@pytest.mark.django_db
def test_a_post_the_size_of_a_long_name_is_still_read():
    name = "\u0915\u093c" * 100  # 300 code points, three bytes each, percent-encoded
    response = Client().post("/evening/", {"name": name, "submission_key": "k" * 64})
    assert response.status_code == 302


# --- No production run on a public key -------------------------------------

GOOD_KEY = "a-long-random-production-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"


def start_site(**env: str) -> subprocess.CompletedProcess:
    """Import the WSGI application as gunicorn does, with debug off."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NIGHTJAR_", "RABBITMQ_"))}
    return subprocess.run(
        [sys.executable, "-c", "import nightjar.wsgi"],
        cwd=ROOT,
        env={**clean, "DJANGO_DEBUG": "0", **env},
        capture_output=True,
        text=True,
    )


@pytest.mark.system
@pytest.mark.transport_free
@pytest.mark.parametrize(
    "key",
    [
        None,
        "",
        "short-key",
        "django-insecure-local-only-never-deploy-this-key",
        "change-me-compose-only-not-for-production-use",
        "x" * 60,
    ],
)
def test_the_site_refuses_to_start_on_a_missing_short_or_public_key(key):
    result = start_site(**({} if key is None else {"DJANGO_SECRET_KEY": key}))
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "the site will not start on a key anyone can read" in result.stderr


@pytest.mark.system
@pytest.mark.transport_free
def test_the_site_starts_on_a_long_random_key_and_in_debug_without_one():
    assert start_site(DJANGO_SECRET_KEY=GOOD_KEY).returncode == 0
    assert start_site(DJANGO_DEBUG="1").returncode == 0


@pytest.mark.fast
def test_docker_compose_has_no_fallback_key():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    key = compose["services"]["web"]["environment"]["DJANGO_SECRET_KEY"]
    assert key.startswith("${DJANGO_SECRET_KEY:?")
    for public in keys.PUBLIC_KEYS:
        assert public not in (ROOT / "docker-compose.yml").read_text()


def forged_session(data) -> str:
    return signing.dumps(
        data, salt="django.contrib.sessions.backends.signed_cookies", serializer=signing.JSONSerializer, compress=True
    )


@pytest.mark.fast
@pytest.mark.django_db
def test_a_cookie_signed_with_the_key_lists_no_registration_it_cannot_prove(client, settings):
    settings.NIGHTJAR_LAB = False
    guests = [register_guest(name=f"Guest {i}", submission_key=None) for i in range(3)]
    pks = [guest.pk for guest in guests]
    for listed in (pks, [[pk, "not-the-secret"] for pk in pks], {"x": pks}, [[pks[0], guests[1].secret]]):
        client.cookies[django_settings.SESSION_COOKIE_NAME] = forged_session({views.SESSION_KEY: listed})
        page = client.get("/registrations/").content.decode()
        for guest in guests:
            assert guest.code not in page and guest.secret not in page
    client.cookies[django_settings.SESSION_COOKIE_NAME] = forged_session(
        {views.SESSION_KEY: [[pks[2], guests[2].secret]]}
    )
    page = client.get("/registrations/").content.decode()
    assert guests[2].secret in page and guests[0].code not in page


@pytest.mark.fast
@pytest.mark.django_db
def test_the_cookie_remembers_a_bounded_number_of_registrations(client, settings):
    settings.NIGHTJAR_LAB = False
    settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE = 0
    for i in range(views.MAX_REMEMBERED + 5):
        assert client.post("/evening/", {"name": f"Guest {i}", "submission_key": f"key{i}"}).status_code == 302
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    assert len(cookie) < 4000
    page = client.get("/registrations/").content.decode()
    newest = Registration.objects.order_by("-id")
    assert all(registration.secret in page for registration in newest[: views.MAX_REMEMBERED])
    assert not any(registration.secret in page for registration in newest[views.MAX_REMEMBERED :])


# --- No guest secret in any log line ---------------------------------------


def raw_request(url: str, method: str, path: str, body: str = "") -> int:
    """One request with exactly this path (no client-side quoting)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    connection.request(method, path, body=body or None, headers=headers)
    status = connection.getresponse().status
    connection.close()
    return status


@pytest.mark.system
@pytest.mark.transport_free
@pytest.mark.django_db(transaction=True)
def test_no_log_stream_of_gunicorn_carries_a_guest_secret(worker_env):
    env = {
        **worker_env,
        "DJANGO_SETTINGS_MODULE": "tests.hostile_site",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": GOOD_KEY,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_COOKIES": "0",
        "NIGHTJAR_LOG_FORMAT": "json",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server, url = start_gunicorn(env, "-c", "gunicorn.conf.py", "--workers", "1", stdout=subprocess.PIPE)
    try:
        status, page, _ = Guest(url).register("Log Probe")
        assert status == 200, page
        registration = Registration.objects.get(name="Log Probe")
        code, secret = registration.code, registration.secret
        other = f"R-{registration.pk + 1:04d}"
        expected = {
            ("GET", f"/registrations/{code}/{secret}/"): 200,
            ("HEAD", f"/registrations/{code}/{secret}/"): 405,
            ("OPTIONS", f"/registrations/{code}/{secret}/ticket/"): 405,
            ("POST", f"/registrations/{code}/{secret}/"): 403,  # no CSRF token
            ("GET", f"/registrations/{other}/{secret}/"): 404,  # the right secret under a wrong ID
            ("GET", f"/registrations/{code}/{secret}/fail/"): 500,
            ("GET", f"/registrations/%20{code}/{secret}/"): 404,
            ("GET", f"/registrations/{code}%09/{secret}/status.json"): 404,
            ("GET", f"/registrations/{code.lower()}/{secret}/ticket/download/"): 404,
            ("GET", f"/registrations/{secret}/"): 404,  # the secret in the ID's place
            ("GET", f"/registrations/{code}/{secret}x/"): 404,
        }
        answered = {
            request: raw_request(url, *request, body="name=x" if request[0] == "POST" else "") for request in expected
        }
        assert answered == expected
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    lines = (out + err).splitlines()
    assert any("/registrations/" in line for line in out.splitlines())  # the access log did log them
    assert any("Forced failure" in line for line in err.splitlines() + out.splitlines())
    leaked = [line for line in lines if secret in line or secret[:20] in line]
    assert leaked == [], f"{len(leaked)} log lines carry the secret"


# --- Smaller -----------------------------------------------------------------


@pytest.mark.fast
@pytest.mark.django_db
def test_guest_pages_with_the_secret_in_their_url_are_never_cached(client):
    registration = register_guest(name="Cache Probe", submission_key=None)
    base = f"/registrations/{registration.code}/{registration.secret}/"
    Ticket.objects.create(registration=registration, name=registration.name)
    for path in (base, base + "status.json", base + "ticket/", base + "ticket/download/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "no-store" in response.get("Cache-Control", ""), path


@pytest.mark.fast
@pytest.mark.django_db
def test_metrics_need_the_permission_to_view_registrations():
    user = User.objects.create_user("clerk", password="correct horse battery staple", is_staff=True)
    staff = Client()
    staff.force_login(user)
    assert staff.get("/metrics").status_code == 403


# --- Trust proxy headers only from the proxy --------------------------------

PROXY = "192.0.2.10"
OUTSIDER = "203.0.113.9"


@pytest.fixture
def behind_proxy(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.NIGHTJAR_TRUSTED_PROXIES = [PROXY]
    settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE = 3
    return settings


@pytest.mark.fast
@pytest.mark.django_db
def test_x_forwarded_proto_counts_from_the_proxy_only(client, behind_proxy):
    assert client.get("/visit/", HTTP_X_FORWARDED_PROTO="https", REMOTE_ADDR=PROXY).status_code == 200
    forged = client.get("/visit/", HTTP_X_FORWARDED_PROTO="https", REMOTE_ADDR=OUTSIDER)
    assert forged.status_code == 301 and forged["Location"].startswith("https://")


@pytest.mark.fast
@pytest.mark.django_db
def test_x_forwarded_for_counts_from_the_proxy_only(behind_proxy):
    def post(remote: str, forwarded: str) -> int:
        response = Client().post(
            "/evening/",
            {"name": "Rate Probe", "submission_key": forwarded.replace(".", "")},
            secure=True,
            REMOTE_ADDR=remote,
            HTTP_X_FORWARDED_FOR=forwarded,
            HTTP_X_FORWARDED_PROTO="https",
        )
        return response.status_code

    # Through the proxy, each client has its own count.
    assert [post(PROXY, f"198.51.100.{i}") for i in range(6)] == [302] * 6
    # Straight to gunicorn, a forged header changes nothing: one client, one count.
    assert [post(OUTSIDER, f"198.51.100.{i}") for i in range(10, 16)] == [302] * 3 + [429] * 3


@pytest.mark.fast
def test_gunicorn_faces_only_a_buffering_proxy():
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert "option http-buffer-request" in guide and "proxy_request_buffering" in guide
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert all(port.startswith("127.0.0.1:") for port in compose["services"]["web"]["ports"])
    config = (ROOT / "gunicorn.conf.py").read_text()
    assert 'os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")' in config


@pytest.mark.fast
@pytest.mark.django_db
def test_a_client_polling_readiness_costs_one_broker_look_per_second(client, monkeypatch, settings):
    settings.NIGHTJAR_HEALTH_CACHE_SECONDS = 1.0
    looks, now = [], [1000.0]
    monkeypatch.setattr(views, "dependency_health", lambda: looks.append(1) or {"database": "ok", "rabbitmq": "ok"})
    monkeypatch.setattr(views, "clock", lambda: now[0])
    monkeypatch.setattr(views, "_health", None)
    for _ in range(50):
        assert client.get("/healthz/ready").status_code == 200
    assert len(looks) == 1
    now[0] += 1.01
    assert client.get("/healthz").status_code == 200
    assert len(looks) == 2


# --- Broker credentials stay on the broker connection -----------------------


def setting_in_a_fresh_process(name: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NIGHTJAR_", "RABBITMQ_"))}
    code = f"import django; django.setup(); from django.conf import settings; print(settings.{name})"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "nightjar.settings", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


@pytest.mark.broker
def test_no_management_api_is_guessed_for_a_remote_broker():
    remote = setting_in_a_fresh_process("RABBITMQ_MANAGEMENT_URL", NIGHTJAR_BROKER_URL="amqp://u:p@rmq-1:5672/%2F")
    assert remote == ""
    local = setting_in_a_fresh_process("RABBITMQ_MANAGEMENT_URL")
    assert local == "http://127.0.0.1:15673/"  # bin/run's own node
    given = setting_in_a_fresh_process(
        "RABBITMQ_MANAGEMENT_URL",
        NIGHTJAR_BROKER_URL="amqp://u:p@rmq-1/",
        RABBITMQ_MANAGEMENT_URL="https://rmq-1:15671/",
    )
    assert given == "https://rmq-1:15671/"


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers GET with a redirect (to `location`) or a queue's JSON, and keeps
    the Authorization header of every request it saw."""

    seen: list = []
    location = ""

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append(self.headers.get("Authorization"))
        if self.location:
            self.send_response(302)
            self.send_header("Location", self.location)
            self.end_headers()
        else:
            body = b'{"messages_ready": 0, "messages_unacknowledged": 0, "consumers": 0}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def recording_server(location: str = ""):
    handler = type("Handler", (Recorder,), {"seen": [], "location": location})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", handler.seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.fast
def test_the_management_call_follows_no_redirect_and_can_use_its_own_user(settings):
    from nightjar_delivery.transport import amqp

    settings.NIGHTJAR_BROKER_URL = "amqp://worker:amqp-password@127.0.0.1:5673/%2F"
    with recording_server() as (elsewhere, stolen), recording_server(location=elsewhere + "x") as (management, asked):
        settings.RABBITMQ_MANAGEMENT_URL = management
        info, why = amqp.management_queue_info()
        assert info is None and "redirect" in why
        assert len(asked) == 1 and stolen == []
        settings.RABBITMQ_MANAGEMENT_URL = elsewhere
        settings.RABBITMQ_MANAGEMENT_USER, settings.RABBITMQ_MANAGEMENT_PASSWORD = "monitor", "monitor-password"
        info, why = amqp.management_queue_info()
        assert info is not None, why
        assert base64.b64decode(stolen[-1].removeprefix("Basic ")) == b"monitor:monitor-password"


@pytest.mark.fast
def test_check_deploy_warns_of_management_credentials_over_plain_http(settings):
    from nightjar_delivery.checks import management_api_over_plain_http

    settings.RABBITMQ_MANAGEMENT_URL = "http://rmq-1:15672/;https://rmq-2:15671/"
    assert [warning.id for warning in management_api_over_plain_http(None)] == ["nightjar.W003"]
    for fine in ("https://rmq-1:15671/", "http://127.0.0.1:15673/", "http://localhost:15672/", ""):
        settings.RABBITMQ_MANAGEMENT_URL = fine
        assert management_api_over_plain_http(None) == []


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_after_a_failure_on_a_read_only_session_the_worker_writes_on_a_new_connection(monkeypatch):
    """A session opened while the database was read-only stays so (it still
    answers SELECT 1): the worker's check after a failure must reconnect, even
    on a persistent connection (DATABASE_URL's CONN_MAX_AGE is 60 s)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.close()
    connection.ensure_connection()
    worker = Worker(handler=handle, stdout=io.StringIO())
    read_only = (
        "PRAGMA query_only = ON"
        if connection.vendor == "sqlite"
        else "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
    )
    with connection.cursor() as cursor:
        cursor.execute(read_only)
    with pytest.raises(DatabaseError):
        Registration.objects.create(name="Read Only")
    worker.connections.suspect()  # as after any failed delivery
    worker.connections.check()
    assert Registration.objects.create(name="Writable Again").pk
