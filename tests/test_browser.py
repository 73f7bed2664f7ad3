"""A real browser (Debian's Chromium, driven by Playwright) against the site
served by gunicorn on loopback, with a real worker process making the ticket.
Screenshots of each step go to test-artifacts/."""

import contextlib
import io
import re
import signal
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import expect, sync_playwright
from pypdf import PdfReader

from tests.conftest import ROOT
from tickets.models import Registration
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# As root and offline: no sandbox, no background calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def chromium(monkeypatch, *extra_args: str):
    """Chromium, headless. Playwright's sync API keeps an event loop running in
    this thread while it is open, so Django takes the ORM calls made meanwhile
    for async code (allowed here: they are plain sync code) and gives them a
    database connection of their own — closed on the way out, else it would
    outlive the test (conftest's no_database_session_outlives_the_tests)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args], headless=True
        )
        try:
            yield browser
        finally:
            browser.close()
            connections.close_all()


def test_a_guest_registers_watches_the_page_switch_and_downloads_the_pdf(site, workers, monkeypatch):
    with chromium(monkeypatch) as browser:
        page = browser.new_page(accept_downloads=True, viewport={"width": 390, "height": 844})
        page.goto(site + "/")
        expect(page.get_by_role("heading", name="Explore the evening")).to_be_visible()
        page.get_by_role("main").get_by_role("link", name="Plan your visit").click()
        page.get_by_role("main").get_by_role("link", name="The evening").click()
        page.get_by_label("Guest name").fill("Zoë Browser")
        page.screenshot(path=ARTIFACTS / "1-form.png")
        page.get_by_role("button", name="Register for the evening").click()

        registration = Registration.objects.get(name="Zoë Browser")
        expect(page.get_by_role("heading", name=f"Registration {registration.code}")).to_be_visible()
        expect(page.get_by_text("Your ticket is being prepared")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "2-being-prepared.png")
        page.evaluate("window.stillTheSamePage = true")

        assert workers.run().returncode == 0
        open_ticket = page.get_by_role("link", name="Open ticket")
        expect(open_ticket).to_be_visible(timeout=15_000)
        assert page.evaluate("window.stillTheSamePage") is True  # swapped in place, no reload
        page.screenshot(path=ARTIFACTS / "3-open-ticket.png")

        open_ticket.click()
        expect(page.get_by_role("link", name="Back to registration")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "4-ticket.png")
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Download ticket").click()
        target = ARTIFACTS / download_info.value.suggested_filename
        download_info.value.save_as(target)

    text = PdfReader(io.BytesIO(Path(target).read_bytes())).pages[0].extract_text()
    assert registration.code in text and "Zoë Browser" in text


def test_staff_see_the_desk_charts_after_a_burst_and_the_desk_refreshes_itself(site, workers, monkeypatch, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # what the site checks with
    User.objects.create_superuser("desk", "desk@example.org", "correct horse battery staple")
    for index in range(40):
        register_guest(name=f"Burst Guest {index}")
    assert workers.run("--drain", "--batch", "10").returncode == 0
    serving = workers.start("--serve")
    serving.wait_for("Serving")
    with chromium(monkeypatch) as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(site + "/admin/login/?next=/admin/tickets/registration/delivery-status/")
        page.get_by_label("Username").fill("desk")
        page.get_by_label("Password").fill("correct horse battery staple")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Delivery status")).to_be_visible()
        charts = page.locator("figure.desk-chart")
        expect(charts).to_have_count(6)  # rates and latency, last hour and last day; the door's arrivals; the mails
        expect(page.get_by_role("heading", name="Arrivals")).to_be_visible()
        rates = charts.filter(has=page.get_by_role("img", name=re.compile("registrations and tickets per minute")))
        expect(rates.first.locator("polyline").first).to_be_visible()
        expect(page.get_by_text("40 registrations and 40 tickets, per minute.").first).to_be_visible()
        expect(page.locator("tr.worker-running")).to_have_count(1)
        expect(page.locator("tr.worker-stopped")).to_have_count(1)  # the drain, which exited cleanly
        page.screenshot(path=ARTIFACTS / "5-desk.png", full_page=True)
        read_at = page.locator(".desk-read-at time").get_attribute("datetime")
        expect(page.locator(".desk-read-at time")).not_to_have_attribute("datetime", read_at, timeout=20_000)
    serving.signal(signal.SIGTERM)
    assert serving.finish()[0] == 0


def test_a_waiting_guest_watches_their_page_turn_into_a_ticket_after_another_guest_cancels(site, workers, monkeypatch):
    """axe-core at 0 on each page the guests see, at a phone's 390×844."""
    from tests.test_door_browser import axe_violations
    from tickets.services import seats

    seats.set_capacity(capacity=1, actor="organiser (test)")
    holder = register_guest(name="Seat Holder")
    assert workers.run().returncode == 0
    with chromium(monkeypatch) as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.goto(site + "/evening/")
        page.get_by_label("Guest name").fill("Wren Waiting")
        page.get_by_role("button", name="Register for the evening").click()
        expect(page.get_by_text("The evening is full: you are on the waiting list")).to_be_visible()
        expect(page.get_by_text("Your place on the waiting list: 1")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "seats-1-waiting.png")
        assert axe_violations(page) == []
        page.evaluate("window.stillTheSamePage = true")

        other = browser.new_page(viewport={"width": 390, "height": 844})
        other.goto(f"{site}/registrations/{holder.code}/{holder.secret}/")
        other.get_by_role("link", name="Cancel registration").click()
        expect(other.get_by_role("heading", name="Cancel your registration?")).to_be_visible()
        other.screenshot(path=ARTIFACTS / "seats-2-cancel-confirm.png")
        assert axe_violations(other) == []
        other.get_by_role("button", name="Yes, cancel my registration").click()
        expect(other.get_by_text("This registration is cancelled").first).to_be_visible()
        other.screenshot(path=ARTIFACTS / "seats-3-cancelled.png")
        assert axe_violations(other) == []

        expect(page.get_by_text("Your ticket is being prepared")).to_be_visible(timeout=15_000)
        page.screenshot(path=ARTIFACTS / "seats-4-being-prepared.png")
        assert workers.run().returncode == 0
        expect(page.get_by_role("link", name="Open ticket")).to_be_visible(timeout=15_000)
        assert page.evaluate("window.stillTheSamePage") is True  # moved on in place, no reload
        page.screenshot(path=ARTIFACTS / "seats-5-open-ticket.png")
        assert axe_violations(page) == []
    waiting = Registration.objects.get(name="Wren Waiting")
    assert waiting.seat == "confirmed" and waiting.tickets.count() == 1


def test_a_guest_gives_an_address_and_their_page_says_the_mail_went_out(site, workers, worker_env, smtp, monkeypatch):
    """The form's optional address (a wrong one refused as Django refuses it),
    the worker's ticket, the sender's mail at a real SMTP server, and the
    guest's page saying it went out; axe-core at 0 at a phone's 390×844."""
    import subprocess
    import sys

    from tests.test_door_browser import axe_violations

    with chromium(monkeypatch) as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.goto(site + "/evening/")
        page.get_by_label("Guest name").fill("Ines Inbox")
        page.get_by_label("E-mail (optional)").fill("ines@example")
        page.get_by_role("button", name="Register for the evening").click()
        expect(page.get_by_text("Please enter an e-mail address such as guest@example.org")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "mail-1-wrong-address.png")
        assert axe_violations(page) == [] and not Registration.objects.exists()
        page.get_by_label("E-mail (optional)").fill("ines@example.org")
        page.get_by_role("button", name="Register for the evening").click()
        registration = Registration.objects.get(name="Ines Inbox")
        expect(page.get_by_text("Mail for this registration goes to ines@example.org.")).to_be_visible()
        assert workers.run().returncode == 0
        env = {**worker_env, "NIGHTJAR_SMTP_HOST": smtp.host, "NIGHTJAR_SMTP_PORT": str(smtp.port)}
        sent = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "send_mail"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "1 sent" in sent.stdout, sent.stdout + sent.stderr
        page.reload()
        expect(page.get_by_text("Your ticket: sent")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "mail-2-sent.png")
        assert axe_violations(page) == []
    [received] = smtp.to("ines@example.org")
    assert received.message["Subject"] == f"Your ticket for the evening ({registration.code})"
