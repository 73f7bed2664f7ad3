"""The door in a real browser: Chromium's fake camera plays a video made from
the QR code of Mina Patel's real ticket PDF (then a forged one, then hers
again); the page decodes it, checks her in (green), refuses the forgery
(red), answers amber the second time. Then the network drops: scans queue
("offline — N scans waiting") and are sent when it is back; sent again,
they change nothing. Screenshots and the measured timings go to test-artifacts/."""

import hashlib
import io
import json
import re
import time

import pytest
import segno
from django.contrib.auth.models import Permission, User
from PIL import Image
from playwright.sync_api import expect
from pypdf import PdfReader

from door.models import CheckIn, Scan
from tests.conftest import ROOT, start_gunicorn
from tests.test_browser import ARTIFACTS, chromium
from tickets import pdf
from tickets.models import Registration, Ticket
from tickets.services.demo import seed_demo

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH, HEIGHT, FPS = 640, 480, 15


def ticket_qr(ticket) -> Image.Image:
    """The QR code as printed: the image inside the ticket's PDF."""
    [image] = PdfReader(io.BytesIO(pdf.render(ticket))).pages[0].images
    return image.image.convert("L")


def frame(code: Image.Image | None) -> Image.Image:
    picture = Image.new("RGB", (WIDTH, HEIGHT), "white")
    if code is not None:
        side = 360
        picture.paste(code.resize((side, side), Image.NEAREST), ((WIDTH - side) // 2, (HEIGHT - side) // 2))
    return picture


def write_y4m(path, scenes: list[tuple[Image.Image | None, int]]) -> None:
    """A YUV4MPEG2 video (what Chromium's fake camera reads) of (picture, frames) scenes."""
    with open(path, "wb") as video:
        video.write(f"YUV4MPEG2 W{WIDTH} H{HEIGHT} F{FPS}:1 Ip A1:1 C420jpeg\n".encode())
        for code, count in scenes:
            y, cb, cr = frame(code).convert("YCbCr").split()
            planes = (
                y.tobytes()
                + cb.resize((WIDTH // 2, HEIGHT // 2)).tobytes()
                + cr.resize((WIDTH // 2, HEIGHT // 2)).tobytes()
            )
            for _ in range(count):
                video.write(b"FRAME\n" + planes)


# The page's own queue of offline scans, as it keeps it (one per staff user).
QUEUED = "JSON.parse(localStorage.getItem('nightjar-door-queue:' + document.getElementById('door').dataset.user))"


def door_staff() -> None:
    user = User.objects.create_user("door", password="correct horse battery staple", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["check_in", "view_checkin"]))


@pytest.mark.system
@pytest.mark.transport_free
def test_the_fake_camera_checks_mina_in_refuses_a_forgery_and_queues_scans_offline(
    site, monkeypatch, settings, tmp_path
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # what the site checks with
    registration, _ = seed_demo()
    ticket = registration.tickets_in_order().get()
    door_staff()
    png = io.BytesIO()
    segno.make("A" * 43, error="m").save(png, kind="png", scale=8, border=4)  # a ticket's shape, not a ticket
    forged = Image.open(png).convert("L")
    video = tmp_path / "door.y4m"
    blank = FPS // 2
    write_y4m(
        video,
        [
            (None, blank),
            (ticket_qr(ticket), FPS),
            (None, blank),
            (forged, FPS),
            (None, blank),
            (ticket_qr(ticket), FPS),
        ],
    )

    camera = [
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-video-capture={video}",
    ]
    with chromium(monkeypatch, *camera) as browser:
        context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        context.grant_permissions(["camera"], origin=site)
        page = context.new_page()
        page.goto(site + "/admin/login/?next=/door/%3Fdoor%3Ddoor%25201")
        page.get_by_label("Username").fill("door")
        page.get_by_label("Password").fill("correct horse battery staple")
        page.get_by_role("button", name="Log in").click()

        answer = page.locator("#answer")
        expect(answer).to_have_class("answer green", timeout=20_000)
        expect(page.locator("#sentence")).to_have_text("Welcome, Mina Patel")
        expect(page.locator("#detail")).to_have_text(f"{registration.code} · {ticket.number}")
        page.screenshot(path=ARTIFACTS / "door-1-green.png")
        expect(answer).to_have_class("answer red", timeout=20_000)
        expect(page.locator("#sentence")).to_have_text("Not a ticket for this evening")
        page.screenshot(path=ARTIFACTS / "door-2-red.png")
        expect(answer).to_have_class("answer amber", timeout=20_000)
        expect(page.locator("#sentence")).to_contain_text("Already checked in at")
        page.screenshot(path=ARTIFACTS / "door-3-amber.png")
        online = page.evaluate("window.doorLog")
        decoder = page.evaluate("window.doorDecoder")

        # Offline: the camera keeps scanning; the page judges by its list and queues.
        page.wait_for_function("window.doorListLoaded === true")
        context.set_offline(True)
        status = page.locator("#status")
        expect(status).to_contain_text("offline — scanning — 2 scans waiting to be sent", timeout=30_000)
        page.screenshot(path=ARTIFACTS / "door-4-offline.png")
        queued = page.evaluate(QUEUED)
        assert ticket.secret not in json.dumps(queued)  # the queue holds digests, never the secrets
        scans_before = Scan.objects.count()
        context.set_offline(False)
        expect(status).to_have_text(re.compile(r"^online"), timeout=30_000)
        page.wait_for_function(f"{QUEUED} === null", timeout=30_000)  # every queued scan answered, the queue gone
        synced = Scan.objects.count()
        assert synced >= scans_before + len(queued)
        # The same scans sent again (the phone lost the first response): nothing changes.
        again = page.evaluate(
            """async (scans) => {
                const csrf = document.getElementById('door').dataset.csrf;
                const response = await fetch('/door/sync.json', {method: 'POST', credentials: 'same-origin',
                    headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},
                    body: JSON.stringify({scans: scans.map(({number, ...scan}) => scan)})});
                return (await response.json()).answers;
            }""",
            queued,
        )
        assert all(answer["repeated"] for answer in again)
        context.close()

    assert CheckIn.objects.count() == 1
    assert Scan.objects.filter(scan_id__in=[scan["scan_id"] for scan in queued]).count() == len(queued)
    assert [entry["colour"] for entry in online[:3]] == ["green", "red", "amber"]
    # From the last frame analysed without the code to the answer on screen: the
    # code entered the view in between (an upper bound); written down, not asserted.
    timings = [
        {
            "colour": entry["colour"],
            "decode_ms": round(entry["decodedAt"] - entry["seenAt"]),
            "answer_after_decode_ms": round(entry["answeredAt"] - entry["decodedAt"]),
            "frame_to_answer_ms_at_most": round(entry["answeredAt"] - entry["emptyAt"]),
        }
        for entry in online[:3]
    ]
    (ARTIFACTS / "door-timings.json").write_text(json.dumps({"decoder": decoder, "scans": timings}, indent=2))
    print("door timings", decoder, timings)


AXE = (ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js").read_text()


def axe_violations(page) -> list[str]:
    """axe-core's violations on the page as it is (from tests/vendor, never a CDN)."""
    page.add_script_tag(content=AXE)
    found = page.evaluate("async () => (await axe.run(document)).violations.map(v => v.id + ': ' + v.help)")
    return found


def many_tickets(count: int) -> list:
    """count guests with a ticket each, as the worker leaves them."""
    registrations = Registration.objects.bulk_create([Registration(name=f"Guest {n}") for n in range(count)])
    return Ticket.objects.bulk_create([Ticket(registration=r, name=r.name) for r in registrations])


def sign_in(page, site, next_url="/door/"):
    page.goto(site + "/admin/login/?next=" + next_url)
    page.get_by_label("Username").fill("door")
    page.get_by_label("Password").fill("correct horse battery staple")
    page.get_by_role("button", name="Log in").click()


@pytest.fixture
def busy_door_site(worker_env):
    """The site as `site` serves it, with room for a long queue's scans in one
    minute (the limit's own behaviour is tests/test_site_limits.py's)."""
    env = {**worker_env, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    server, url = start_gunicorn({**env, "NIGHTJAR_DOOR_SCANS_PER_MINUTE": "1000"}, "--workers", "1")
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def slow_door_site(worker_env):
    """The site with a scan limit a test reaches: 5 a minute."""
    env = {**worker_env, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    server, url = start_gunicorn({**env, "NIGHTJAR_DOOR_SCANS_PER_MINUTE": "5"}, "--workers", "1")
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.system
@pytest.mark.transport_free
def test_back_online_past_the_scan_limit_the_admitted_guests_scans_go_first_and_the_page_says_so(
    slow_door_site, monkeypatch, settings
):
    """60 scans queued offline, the guests let in at 1, 31, 55 and 60, a limit
    of 5 scans a minute: in queue order (chunks of 50) the guests at 55 and 60
    would wait a minute unchecked-in while another door could admit them again.
    The page sends the admitted first and says the rest follow within the limit."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    door_staff()
    tickets = many_tickets(60)
    admitted = {0, 30, 54, 59}
    scans = [
        {
            "scan_id": f"q-{n}",
            "code_sha256": hashlib.sha256(t.secret.encode()).hexdigest(),
            "door": "North",
            "scanned_at": "2026-12-04T19:00:00.000Z",
            "offline": True,
            "admitted": n in admitted,
        }
        for n, t in enumerate(tickets)
    ]
    with chromium(monkeypatch) as browser:
        context = browser.new_context()
        page = context.new_page()
        sign_in(page, slow_door_site)
        status = page.locator("#status")
        expect(status).to_have_text("online — no camera: type ticket numbers", timeout=20_000)
        context.set_offline(True)
        expect(status).to_contain_text("offline — no camera", timeout=10_000)
        page.evaluate(
            "(scans) => localStorage.setItem('nightjar-door-queue:' + document.getElementById('door').dataset.user,"
            " JSON.stringify(scans))",
            scans,
        )
        context.set_offline(False)
        expect(status).to_have_text(
            "online — 55 scans waiting to be sent: every admitted guest's scan is sent; "
            "the rest follow within the server's limit of 5 scans a minute",
            timeout=30_000,
        )
        page.screenshot(path=ARTIFACTS / "door-8-admitted-first.png")
        assert len(page.evaluate(QUEUED)) == 55
        context.close()
    assert set(CheckIn.objects.values_list("ticket_id", flat=True)) == {tickets[n].pk for n in admitted}
    assert Scan.objects.count() == 5


@pytest.mark.system
@pytest.mark.transport_free
def test_a_phone_without_camera_offline_for_250_scans_sends_every_one_and_a_stale_token_admits_nobody(
    busy_door_site, monkeypatch, settings
):
    site = busy_door_site
    """No camera: no black box, an honest status, the door named per phone.
    Offline: 250 scans queued in the page's own format (100 admitted, one
    hostile) and a typed number judged by the list as the server judges it;
    back online, every scan reaches the server in chunks, one check-in per
    admitted ticket and none for the scans shown red. Then a stale token:
    "signed out", nothing admitted. axe-core at 0 on the door and arrivals."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    door_staff()
    tickets = many_tickets(252)
    typed_ticket, turned_away, *queued_tickets = tickets
    with chromium(monkeypatch) as browser:
        context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page = context.new_page()
        sign_in(page, site)
        status = page.locator("#status")
        expect(status).to_have_text("online — no camera: type ticket numbers", timeout=20_000)
        assert page.locator("#camera-box").is_hidden()
        assert page.locator("#door-name").input_value() == ""  # each phone names its door
        page.locator("#door-name").fill("North")
        page.locator("#door-name").dispatch_event("change")
        page.wait_for_function("window.doorListLoaded === true")
        page.screenshot(path=ARTIFACTS / "door-5-no-camera.png")
        assert axe_violations(page) == []

        context.set_offline(True)
        expect(status).to_contain_text("offline — no camera", timeout=10_000)
        page.locator("#ticket-number").fill(typed_ticket.number.replace("T-", "t-0"))  # t-00NN: the server reads T-00NN
        page.get_by_role("button", name="Check in").click()
        expect(page.locator("#sentence")).to_have_text("Welcome")  # by the list's numbers, as the server judges
        page.locator("#ticket-number").fill("T-99999")
        page.get_by_role("button", name="Check in").click()
        expect(page.locator("#answer")).to_have_class("answer red")
        # 250 more scans, as the page queues them (digests, never secrets): 100 admitted,
        # 149 turned away by the list (shown red), one hostile (a NUL in the door name).
        scans = [
            {
                "scan_id": f"q-{n}",
                "code_sha256": hashlib.sha256(t.secret.encode()).hexdigest(),
                "door": "North",
                "scanned_at": "2026-12-04T19:00:00.000Z",
                "offline": True,
                "admitted": n < 100,
            }
            for n, t in enumerate(queued_tickets[:249])
        ]
        scans.append({**scans[0], "scan_id": "q-hostile", "door": "North\u0000", "code_sha256": "zz"})
        page.evaluate(
            "(scans) => { const key = 'nightjar-door-queue:' + document.getElementById('door').dataset.user;"
            " localStorage.setItem(key, JSON.stringify(JSON.parse(localStorage.getItem(key)).concat(scans))); }",
            scans,
        )
        page.evaluate("() => window.dispatchEvent(new Event('offline'))")
        expect(status).to_contain_text("252 scans waiting to be sent")
        page.screenshot(path=ARTIFACTS / "door-6-offline-queue.png")

        started = time.monotonic()
        context.set_offline(False)
        page.wait_for_function(f"{QUEUED} === null", timeout=60_000)
        drained = time.monotonic() - started
        expect(status).to_have_text("online — no camera: type ticket numbers")

        # A stale token (signed out and in again elsewhere): "signed out", never "offline", nothing admitted.
        page.evaluate("() => { document.getElementById('door').dataset.csrf = 'stale'; }")
        page.locator("#ticket-number").fill(turned_away.number)
        page.get_by_role("button", name="Check in").click()
        expect(page.locator("#sentence")).to_have_text("Signed out: reload the page")
        expect(status).to_contain_text("Signed out: reload the page and sign in.")
        page.screenshot(path=ARTIFACTS / "door-7-signed-out.png")
        assert page.evaluate(QUEUED) is None  # nothing queued as admitted

        arrivals = context.new_page()
        arrivals.goto(site + "/door/arrivals/")
        arrivals_violations = axe_violations(arrivals)
        # Signing out (the admin's "Log out") leaves the phone without the list of tickets.
        page.reload()  # a fresh token: the list is loaded again
        page.wait_for_function("window.doorListLoaded === true")
        assert page.evaluate("localStorage.getItem('nightjar-door-list')") is not None
        arrivals.goto(site + "/admin/")
        arrivals.get_by_role("button", name="Log out").click()
        expect(arrivals.get_by_text("Logged out")).to_be_visible()
        assert arrivals.evaluate("localStorage.getItem('nightjar-door-list')") is None
        context.close()

    assert arrivals_violations == []
    admitted = {typed_ticket.pk, *(t.pk for t in queued_tickets[:100])}
    assert set(CheckIn.objects.values_list("ticket_id", flat=True)) == admitted
    assert Scan.objects.filter(scan_id__startswith="q-").count() == 250
    assert Scan.objects.get(scan_id="q-hostile").colour == "red"
    assert not CheckIn.objects.filter(ticket=turned_away).exists()
    (ARTIFACTS / "door-sync.json").write_text(json.dumps({"queued": 252, "drain_seconds": round(drained, 2)}))
    print(f"door sync: 252 queued scans drained in {drained:.2f} s")
