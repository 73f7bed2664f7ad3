"""The operations desk: the dashboard with its charts and buttons, the
workers table, each registration's history, and the operator signals
(Prometheus metrics from the web and the worker, JSON logs) — with real rows,
a real broker and real worker and gunicorn processes."""

import io
import json
import re
import signal
import subprocess
import time
import urllib.request
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import OperationalError, connection
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from devtools.guest import Guest
from devtools.ports import free_port
from nightjar_delivery.worker import Worker
from tests.conftest import start_gunicorn
from tests.helpers import until
from tickets.handler import handle
from tickets.models import Completion, DeliveryFailure, Redelivery, Registration, StaffAction, Ticket, WorkerReport
from tickets.services.activity import activity
from tickets.services.history import HISTORY_PER_KIND
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import register_guest, retry_registration

pytestmark = pytest.mark.django_db(transaction=True)

DESK = "/admin/tickets/registration/delivery-status/"


def made(name: str, *, ago: float, waited: float | None) -> Registration:
    """A registration stored `ago` seconds back, with its ticket `waited` seconds later (or none)."""
    created = timezone.now() - timedelta(seconds=ago)
    registration = Registration.objects.create(name=name, created=created)
    if waited is not None:
        Completion.objects.create(registration=registration, completed=created + timedelta(seconds=waited))
        Ticket.objects.create(registration=registration, name=name, issued=created + timedelta(seconds=waited))
    return registration


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, parsed by prometheus-client's own parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.fast
def test_activity_counts_per_minute_and_latency_percentiles():
    now = timezone.now()
    for index in range(10):  # ten tickets issued 3 minutes ago, latencies 1..10 s
        made(f"Guest {index}", ago=180 + index + 1, waited=index + 1)
    made("Still Waiting", ago=30, waited=None)
    hour = activity(window=timedelta(hours=1), bucket_seconds=60, now=now)
    assert len(hour.registrations) == 60 and hour.totals == (11, 10)
    issued_bucket = hour.tickets.index(max(hour.tickets))
    assert hour.tickets[issued_bucket] == 10
    assert hour.p50[issued_bucket] == 5.0 and hour.p99[issued_bucket] == 10.0
    assert hour.p50[-1] is None  # no ticket in the last minute: no latency, not zero
    day = activity(window=timedelta(days=1), bucket_seconds=900, now=now)
    assert len(day.registrations) == 96 and day.totals == (11, 10)


@pytest.mark.fast
def test_the_dashboard_draws_charts_and_says_when_it_read_its_numbers(staff):
    for index in range(5):
        made(f"Guest {index}", ago=600 - index * 60, waited=0.5 + index)
    made("Waiting", ago=5, waited=None)
    page = staff.get(DESK).content.decode()
    assert "Numbers read at" in page and " UTC</time>" in page
    assert page.count("<svg viewBox") == 6  # rates and latency, last hour and last day; the door's arrivals; mail
    assert "6 registrations and 5 tickets, per minute." in page
    assert "Slowest p99: 4.5 s" in page
    assert re.search(r'<polyline class="series-a" points="[\d., ]+"', page)
    assert re.search(r'<rect class="series-a bar" x="[\d.]+" y="[\d.]+"', page)  # registrations as bars
    assert "desk.js" in page and 'data-refresh-seconds="10"' in page
    assert '<span class="desk-number">1</span> pending' in page
    # What desk.js fetches: the same numbers without the page around them.
    fragment = staff.get(DESK + "?fragment=1")
    assert "no-store" in fragment["Cache-Control"]
    body = fragment.content.decode()
    assert "<html" not in body and "Numbers read at" in body and body.count("<svg") == 6
    index = staff.get("/admin/").content.decode()
    assert DESK in index and "Operations desk" in index


@pytest.mark.fast
def test_reconcile_and_audit_buttons_run_the_services_and_show_their_result(staff):
    stuck = made("Lost Publish", ago=300, waited=None)  # stored, never published
    made("Done", ago=200, waited=1)
    response = staff.post(DESK + "reconcile/", follow=True)
    page = response.content.decode()
    assert "Reconcile republished 1 registration(s), 0 still due" in page
    action = StaffAction.objects.get(registration=stuck)
    assert (action.action, action.actor) == ("republish", "desk (admin)")
    page = staff.post(DESK + "audit/", follow=True).content.decode()
    assert "Audit: pending for more than 300 s: " + stuck.code in page  # it has no ticket yet: the audit says so
    Completion.objects.create(registration=stuck)
    Ticket.objects.create(registration=stuck, name=stuck.name)
    page = staff.post(DESK + "audit/", follow=True).content.decode()
    assert "Audit passed: 2 registrations checked" in page


@pytest.mark.fast
def test_a_view_only_user_sees_the_desk_but_cannot_reconcile(client):
    viewer = User.objects.create_user("viewer", password="pw-for-a-viewer-1", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_registration"))
    client.force_login(viewer)
    made("Lost Publish", ago=300, waited=None)
    assert client.get(DESK).status_code == 200
    assert client.post(DESK + "reconcile/").status_code == 403
    assert not StaffAction.objects.exists()


@pytest.mark.broker
@pytest.mark.postgres
def test_the_worker_table_shows_workers_running_then_a_killed_one_as_gone(staff, workers, worker_env, settings):
    settings.NIGHTJAR_WORKER_GONE_SECONDS = 3
    env = {**worker_env, "NIGHTJAR_WORKER_REPORT_SECONDS": "0.5"}
    for index in range(6):
        register_guest(name=f"Table Guest {index}")
    killed = workers.start("--serve", "--batch", "10", env=env)
    killed.wait_for("Serving")
    until(lambda: Ticket.objects.count() == 6, what="six tickets")
    row = until(lambda: WorkerReport.objects.filter(pid=killed.proc.pid, handled=6).first(), what="the report")
    assert row.mode.startswith("serve, batch 10, prefetch") and row.current.startswith("batch of")
    page = staff.get(DESK).content.decode()
    assert re.search(rf'<tr class="worker-running"><td>[^<]*:{killed.proc.pid}</td><td>running</td>', page)
    stopped = workers.start("--serve", env=env)
    stopped.wait_for("Serving")
    killed.proc.kill()  # SIGKILL: it cannot say goodbye
    killed.proc.wait()
    stopped.signal(signal.SIGTERM)
    assert stopped.finish()[0] == 0
    time.sleep(3.5)
    page = staff.get(DESK).content.decode()
    assert re.search(rf'<tr class="worker-gone"><td>[^<]*:{killed.proc.pid}</td><td>gone</td>', page)
    assert re.search(rf'<tr class="worker-stopped"><td>[^<]*:{stopped.proc.pid}</td><td>stopped</td>', page)
    assert "<td>6</td>" in page  # what the killed one had handled stays on the desk
    assert "In the last day: 0 running, 1 gone, 1 stopped." in page


@pytest.mark.broker
def test_a_one_shot_worker_is_labelled_as_one_and_reported_stopped_when_it_ends(workers, worker_env):
    """A learner's plain `worker --pause …` reports while it waits: the desk and
    status call it a one-delivery run (not "drain"), and stopped once it ended."""
    register_guest(name="One Shot")
    env = {**worker_env, "NIGHTJAR_WORKER_REPORT_SECONDS": "0.5"}
    paused = workers.start("--pause", "before-write", env=env)
    paused.wait_for("Paused before-write.")
    row = until(lambda: WorkerReport.objects.filter(pid=paused.proc.pid).first(), what="the report")
    assert row.mode.startswith("one delivery, per delivery") and row.stopped is None
    paused.send("")  # Enter: carry on
    assert paused.finish()[0] == 0
    assert WorkerReport.objects.get(pid=paused.proc.pid).stopped is not None
    assert Ticket.objects.filter(name="One Shot").count() == 1


@pytest.mark.broker
def test_a_starting_worker_forgets_the_workers_not_seen_for_a_week(workers):
    """Every worker process leaves a row; restarts and the soak's kills add up.
    A worker starting deletes those not seen for NIGHTJAR_WORKER_REPORT_DAYS (7)."""
    now = timezone.now()
    for pid, days, stopped in ((1, 8, True), (2, 7.1, False), (3, 6.9, False), (4, 1, True)):
        seen = now - timedelta(days=days)
        WorkerReport.objects.create(
            name=f"old-host:{pid}", host="old-host", pid=pid, transport="rabbitmq", mode="serve",
            started=seen, last_seen=seen, stopped=seen if stopped else None,
        )  # fmt: skip
    assert workers.run("--drain").returncode == 0
    kept = set(WorkerReport.objects.values_list("host", "pid"))
    assert {("old-host", 3), ("old-host", 4)} <= kept and not {("old-host", 1), ("old-host", 2)} & kept
    assert len(kept) == 3  # and the drain's own row


@pytest.mark.broker
def test_a_registration_page_tells_its_whole_history(staff, workers):
    registration = register_guest(name="Long Story")
    crashed = workers.run("--crash", "before")  # takes the delivery and dies before writing
    assert crashed.returncode == 21
    retry_registration(code=registration.code, actor="desk (admin)")
    Registration.objects.filter(pk=registration.pk).update(created=timezone.now() - timedelta(seconds=120))
    reconcile_registrations(older_than=60)
    assert workers.run("--drain").returncode == 0
    redelivery = Redelivery.objects.get(registration=registration)
    assert redelivery.delivery >= 2
    page = staff.get(f"/admin/tickets/registration/{registration.pk}/change/").content.decode()
    history = page[page.index('<table class="history">') :]
    steps = re.findall(r"<tr><td>[^<]+</td><td>([^<]+)</td>", history)
    assert steps[0] == "registered" and "retry" in steps and "republish" in steps
    assert "delivered again" in steps and "ticket issued" in steps
    assert steps.index("delivered again") < steps.index("ticket issued")
    assert "Published 3 time(s) (2 republished by reconcile, retry or requeue); 1 redelivery(ies) recorded" in page
    assert "nightjar (reconcile)" in history and f"delivery {redelivery.delivery}, to worker" in history


@pytest.mark.fast
def test_metrics_are_for_staff_or_the_token_and_count_what_happened(client, staff, settings):
    settings.NIGHTJAR_METRICS_TOKEN = "scrape-token-1234"
    anonymous = client.__class__()
    assert anonymous.get("/metrics").status_code == 403
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    before = samples(anonymous.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-1234").content.decode())
    for index in range(3):
        register_guest(name=f"Counted {index}")
    made("Already Done", ago=100, waited=1)
    response = staff.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=")
    after = samples(response.content.decode())
    created = ("nightjar_registrations_created_total", ())
    assert after[created] - before.get(created, 0) == 3
    assert after[("nightjar_registrations_pending", ())] == 3
    assert after[("nightjar_broker_up", ())] == 1 and after[("nightjar_queue_ready", ())] == 3
    assert after[("nightjar_deliveries_total", (("outcome", "handled"),))] >= 0


@pytest.mark.broker
def test_a_worker_serves_its_metrics_on_its_own_port(workers):
    # A worker crashes before writing the first registration's ticket: the one that serves
    # the metrics gets it redelivered, makes its ticket, and counts its latency too.
    crashed = register_guest(name="Crashed Before")
    assert workers.run("--crash", "before").returncode == 21
    port = free_port()
    worker = workers.start("--serve", "--metrics-port", str(port))
    worker.wait_for(f"Metrics on http://127.0.0.1:{port}/metrics")
    worker.wait_for("Serving")
    for index in range(4):
        register_guest(name=f"Metered {index}")
    until(lambda: Ticket.objects.count() == 5, what="five tickets")
    time.sleep(0.3)  # the last ack and metric after the commit
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        scraped = samples(response.read().decode())
    assert f"Received {crashed.code} redelivered=True" in "".join(worker.read_so_far())
    assert scraped[("nightjar_deliveries_total", (("outcome", "handled"),))] == 5
    assert scraped[("nightjar_deliveries_total", (("outcome", "failed"),))] == 0
    assert scraped[("nightjar_handler_seconds_count", ())] == 5
    assert scraped[("nightjar_registration_to_ticket_seconds_count", ())] == 5
    worker.signal(signal.SIGTERM)
    assert worker.finish()[0] == 0


@pytest.mark.fast
def test_a_database_error_asking_for_the_latency_costs_the_observation_never_the_delivery(monkeypatch):
    """Asked after the commit (the ack maybe sent): the worker must not fail a done delivery."""

    def broken(*args):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Ticket.objects, "made_since", broken)
    worker = Worker(handler=handle, stdout=io.StringIO())
    assert worker.report.made_since(1, timezone.now()) is False
    assert worker.connections.suspected  # the connection is checked before the next delivery


@pytest.mark.fast
def test_a_health_file_that_cannot_be_touched_is_said_once_and_again_when_it_can(tmp_path, settings, caplog):
    """The loop touches it every second while it runs: a folder gone for a
    day must not write 86,400 warnings, and the log says when it works again."""
    settings.NIGHTJAR_WORKER_REPORT_SECONDS = 0  # the beat's other job, the report row, is not this test's
    folder = tmp_path / "run"
    worker = Worker(handler=handle, stdout=io.StringIO(), health_file=str(folder / "healthy"))
    caplog.set_level("INFO", logger="nightjar_delivery.worker")
    for _ in range(30):  # thirty seconds of the loop (each beat a second after the one before)
        worker.report.last_beat -= 1.0
        worker.report.beat()
    assert [record.levelname for record in caplog.records] == ["WARNING"]
    assert "healthy" in caplog.records[0].getMessage()
    folder.mkdir()
    for _ in range(3):
        worker.report.last_beat -= 1.0
        worker.report.beat()
    assert (folder / "healthy").exists()
    assert [record.levelname for record in caplog.records] == ["WARNING", "INFO"]
    assert "works again" in caplog.records[1].getMessage()


@pytest.mark.system
def test_gunicorn_adds_up_its_processes_metrics_and_logs_json_lines(worker_env):
    env = {
        **worker_env,
        "NIGHTJAR_METRICS_TOKEN": "scrape-token-5678",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_DEBUG": "1",  # plain HTTP here: cookies without Secure
        "NIGHTJAR_LOG_FORMAT": "json",  # which debug would otherwise make plain
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server, url = start_gunicorn(env, "-c", "gunicorn.conf.py", "--workers", "3", stdout=subprocess.PIPE)
    try:
        guest = Guest(url)
        for index in range(12):  # new connections each time: the processes share them out
            status, page, _ = guest.register(f"Multi {index}")
            assert status == 200, page
        request = urllib.request.Request(url + "/metrics", headers={"Authorization": "Bearer scrape-token-5678"})
        with urllib.request.urlopen(request, timeout=10) as response:
            scraped = samples(response.read().decode())
        assert scraped[("nightjar_registrations_created_total", ())] == 12
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    access = [entry for entry in lines if entry["logger"] == "gunicorn.access"]
    posts = [entry for entry in access if entry.get("method") == "POST" and entry.get("path") == "/evening/"]
    assert len(posts) == 12 and all(entry["status"] == 302 for entry in posts)
    assert all(entry["time"].endswith("+00:00") for entry in lines)
    secrets = [entry["path"] for entry in access if entry["path"].startswith("/registrations/R-")]
    assert secrets and all(re.fullmatch(r"/registrations/R-\d+/\*\*\*/", path) for path in secrets)
    errors = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("Booting worker" in entry["message"] for entry in errors)
    assert not [line for line in err.splitlines() if line.strip() and not line.startswith("{")]


@pytest.mark.fast
def test_the_workers_plain_statements_store_times_and_rows_as_the_orm_would():
    """The hot path writes through the DB-API cursor (nightjar_delivery/sql.py): what
    it stores must read back through the ORM exactly as an ORM write would."""
    registration = Registration.objects.create(name="Plain Writer")
    before = timezone.now()
    assert Completion.objects.insert_new([registration.pk]) == {registration.pk}
    assert Completion.objects.insert_new([registration.pk]) == set()  # the key is there: nothing new
    Ticket.objects.issue(registration_id=registration.pk, name=registration.name)
    after = timezone.now()
    completion, ticket = Completion.objects.get(), Ticket.objects.get()
    for stored in (completion.completed, ticket.issued):
        assert stored.utcoffset() == timedelta(0) and before <= stored <= after
    assert len(ticket.secret) >= 43 and ticket.name == "Plain Writer"
    (name, seat), created = Registration.objects.stored([registration.pk])[registration.pk]
    # When it was stored, in seconds since the epoch (SQLite's julianday keeps milliseconds).
    assert (name, seat) == ("Plain Writer", "confirmed") and abs(created - registration.created.timestamp()) < 0.002
    assert activity(window=timedelta(hours=1), bucket_seconds=60).totals == (1, 1)


@pytest.mark.fast
def test_on_postgresql_the_workers_statements_become_prepared_statements():
    """Planning a 50-row INSERT costs about as much as running it: the hot
    path's statements are prepared once per connection (unless
    NIGHTJAR_PREPARED_STATEMENTS=0, for poolers that do not keep them)."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's; bin/test runs this file on PostgreSQL too")
    registration = Registration.objects.create(name="Prepared Guest")
    for _ in range(6):
        assert Registration.objects.stored([registration.pk])[registration.pk][0] == ("Prepared Guest", "confirmed")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("FROM tickets_registration WHERE id = ANY" in statement for statement in prepared), prepared


@pytest.mark.fast
def test_on_postgresql_a_batchs_keys_and_tickets_are_one_statement_text_whatever_its_size():
    """A batch's keys and tickets go as arrays: one statement text for
    batches of any size, prepared once per connection, where a multi-row
    VALUES of 100 or 200 parameters had psycopg parse its text anew on every
    batch (its cache stops at 50 parameters) and never became prepared."""
    if connection.vendor != "postgresql":
        pytest.skip("arrays and prepared statements are PostgreSQL's; bin/test runs this file on PostgreSQL too")
    registrations = Registration.objects.bulk_create([Registration(name=f"Array Guest {i}") for i in range(21)])
    ids, start = [registration.pk for registration in registrations], 0
    for size in range(1, 7):  # six batches of six sizes: 21 registrations
        batch = ids[start : start + size]
        start += size
        assert Completion.objects.insert_new(batch) == set(batch)
        Ticket.objects.issue_many([(pk, f"Array Guest {pk}") for pk in batch])
    assert Completion.objects.insert_new(ids[:3]) == set()  # the keys are there: nothing new
    assert sorted(Ticket.objects.values_list("registration_id", flat=True)) == ids
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    for table in ("tickets_completion", "tickets_ticket"):
        assert any(f"INSERT INTO {table}" in statement for statement in prepared), prepared


@pytest.mark.fast
def test_a_registration_redelivered_thousands_of_times_shows_a_bounded_history(staff):
    """Hostile or sick traffic can leave thousands of events on one registration:
    its page shows the newest of each kind, says how many it left out, and
    still counts them all (a loop over every row cost seconds per page view)."""
    registration = register_guest(name="Many Returns")
    now = timezone.now()
    Redelivery.objects.bulk_create(
        Redelivery(registration=registration, worker="w:1", delivery=n + 2, at=now + timedelta(milliseconds=n))
        for n in range(3000)
    )
    DeliveryFailure.objects.bulk_create(
        DeliveryFailure(registration=registration, worker="w:1", error="boom", at=now + timedelta(milliseconds=n))
        for n in range(2000)
    )
    page = staff.get(f"/admin/tickets/registration/{registration.pk}/change/").content.decode()
    history = page[page.index('<table class="history">') :]
    steps = re.findall(r"<tr><td>[^<]+</td><td>([^<]+)</td>", history)
    assert steps.count("delivered again") == HISTORY_PER_KIND
    assert steps.count("attempt failed") == HISTORY_PER_KIND
    assert steps[:2] == ["registered", "not shown"]
    assert f"{3000 + 2000 - 2 * HISTORY_PER_KIND} older event(s)" in history
    assert "delivery 3001, to worker w:1" in history  # the newest is shown, the oldest not
    assert "delivery 2, to worker" not in history
    assert "3000 redelivery(ies) recorded, 2000 failed attempt(s)." in page
