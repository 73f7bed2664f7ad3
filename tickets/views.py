"""Guest pages. Each view binds a form or looks a registration up, calls one
service, and renders or redirects. Guest URLs carry the registration's secret:
a wrong or missing secret is a 404, exactly like an unknown ID."""

import logging
import time

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from nightjar.middleware import client_address
from nightjar.ratelimit import over_limit
from nightjar_delivery import dependency_health
from tickets import pdf
from tickets.forms import EveningForm, new_submission_key
from tickets.models import Registration, Seat
from tickets.services import seats
from tickets.services.registrations import SubmissionConflict, UnknownRegistration, find_registration, register_guest

SESSION_KEY = "nightjar_registrations"
logger = logging.getLogger(__name__)


def guest_registration(code: str, secret: str) -> Registration:
    try:
        registration = find_registration(code=code)
    except UnknownRegistration:
        raise Http404("No such registration.") from None
    if not registration.secret_matches(secret):
        raise Http404("No such registration.")
    return registration


def registration_url(registration: Registration) -> str:
    return reverse("registration", args=[registration.code, registration.secret])


@require_GET
def home(request):
    return render(request, "tickets/home.html")


@require_GET
def visit(request):
    return render(request, "tickets/visit.html")


def over_rate_limit(request) -> bool:
    """One client address's registration POSTs this minute, past NIGHTJAR_REGISTRATIONS_PER_MINUTE."""
    return over_limit(f"nightjar:registrations:{client_address(request)}", settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE)


@require_http_methods(["GET", "POST"])
@never_cache  # the answer to a POST leads to the guest's secret link (and the cookie that remembers it)
def evening(request):
    if request.method == "POST" and over_rate_limit(request):
        response = render(request, "tickets/too_many.html", status=429)
        response["Retry-After"] = "60"
        return response
    if request.method == "POST":
        form = EveningForm(request.POST)
        if form.is_valid():
            try:
                registration = register_guest(
                    name=form.cleaned_data["name"],
                    submission_key=form.cleaned_data["submission_key"] or None,
                    email=form.cleaned_data["email"],
                )
            except SubmissionConflict as error:
                form.add_error("name", str(error))
            else:
                remember(request, registration)
                return redirect(registration_url(registration))
        # A form with errors gets a new key, so the corrected one is a new submission.
        form.data = form.data.copy()
        form.data["submission_key"] = new_submission_key()
    else:
        form = EveningForm(initial={"submission_key": new_submission_key()})
    return render(request, "tickets/evening.html", {"form": form}, status=200)


# The most registrations one browser's cookie remembers (about 50 bytes
# each): the signed session cookie stays well under browsers' 4 KB.
MAX_REMEMBERED = 40


def remembered(request) -> dict[int, str]:
    """What this browser registered, as {pk: secret}; anything else in the
    cookie (an older form, a forged list) is ignored."""
    entries = request.session.get(SESSION_KEY, [])
    pairs = (
        [entry for entry in entries if isinstance(entry, list) and len(entry) == 2] if isinstance(entries, list) else []
    )
    return {pk: secret for pk, secret in pairs[-MAX_REMEMBERED:] if isinstance(pk, int) and isinstance(secret, str)}


def remember(request, registration: Registration) -> None:
    """The "Your registrations" page lists what this browser registered. The
    cookie holds each one's secret too: the list grants nothing by itself
    (a cookie signed with a leaked key names only registrations it can prove)."""
    seen = remembered(request)
    if seen.get(registration.pk) != registration.secret:
        seen.pop(registration.pk, None)
        seen[registration.pk] = registration.secret
        request.session[SESSION_KEY] = [[pk, secret] for pk, secret in seen.items()][-MAX_REMEMBERED:]


@require_GET
@never_cache  # it lists the guest's secret links
def registration_list(request):
    if settings.NIGHTJAR_LAB:
        registrations = Registration.objects.order_by("-id")[:500]
    else:
        seen = remembered(request)
        registrations = [
            registration
            for registration in Registration.objects.filter(pk__in=seen).order_by("-id")
            if registration.secret_matches(seen[registration.pk])
        ]
    rows = [(registration, registration_url(registration)) for registration in registrations]
    return render(request, "tickets/registrations.html", {"rows": rows, "lab": settings.NIGHTJAR_LAB})


@require_GET
@never_cache  # the secret is in the URL: no cache may keep the page
def registration_detail(request, code: str, secret: str):
    registration = guest_registration(code, secret)
    ticket = registration.tickets_in_order().first()
    context = {"registration": registration, "ticket": ticket, "mails": mails_of(registration), **seat_of(registration)}
    return render(request, "tickets/registration.html", context)


def mails_of(registration: Registration) -> list:
    """The guest's mails, oldest first, when the site sends mail (the mail
    app's rows point here; this app does not import it)."""
    if not registration.email or not hasattr(registration, "mails"):
        return []
    return list(registration.mails.order_by("id"))


def seat_of(registration: Registration) -> dict:
    """What the registration page says about the seat: waiting (and the
    place), cancelled, or neither (it has a seat: the ticket as before)."""
    return {
        "waiting": registration.seat == Seat.WAITING,
        "place": seats.waiting_place(registration),
        "cancelled": registration.seat == Seat.CANCELLED,
    }


@require_GET
def registration_status(request, code: str, secret: str):
    registration = guest_registration(code, secret)
    seat = seat_of(registration)
    ready = not seat["cancelled"] and not seat["waiting"] and registration.tickets.exists()
    ticket_url = reverse("ticket", args=[registration.code, registration.secret]) if ready else None
    state = "cancelled" if seat["cancelled"] else "waiting" if seat["waiting"] else "ready" if ready else "pending"
    response = JsonResponse(
        {"id": registration.code, "ready": ready, "ticket_url": ticket_url, "state": state, "place": seat["place"]}
    )
    response["Cache-Control"] = "no-store"
    return response


def over_cancel_limit(request) -> bool:
    """One client address's cancel POSTs this minute, past the registration form's limit."""
    return over_limit(f"nightjar:cancels:{client_address(request)}", settings.NIGHTJAR_REGISTRATIONS_PER_MINUTE)


@require_http_methods(["GET", "POST"])
@never_cache  # the secret is in the URL: no cache may keep the page
def registration_cancel(request, code: str, secret: str):
    """GET: ask ("Cancel your registration?"); POST (CSRF-checked): cancel.
    The secret link is the authority, as for the ticket. A repeated POST
    finds it cancelled already and says so; nothing changes twice."""
    registration = guest_registration(code, secret)
    if request.method == "POST":
        if over_cancel_limit(request):
            response = render(request, "tickets/too_many_cancels.html", {"registration": registration}, status=429)
            response["Retry-After"] = "60"
            return response
        try:
            seats.cancel_registration(registration=registration, actor=seats.GUEST_ACTOR)
        except seats.AlreadyCancelled:
            messages.info(request, "This registration was already cancelled.")
        else:
            messages.success(request, "Your registration is cancelled.")
        return redirect(registration_url(registration))
    if registration.seat == Seat.CANCELLED:
        return redirect(registration_url(registration))
    return render(request, "tickets/cancel.html", {"registration": registration, **seat_of(registration)})


@require_GET
@never_cache  # the secret is in the URL: no cache may keep the page
def ticket_detail(request, code: str, secret: str):
    registration = guest_registration(code, secret)
    ticket = registration.tickets_in_order().first()
    if registration.seat == Seat.CANCELLED:  # its ticket, if made, is void
        messages.info(request, "This registration is cancelled; its ticket is no longer valid.")
        return redirect(registration_url(registration))
    if registration.seat == Seat.WAITING:
        messages.info(request, "You are on the waiting list; there is no ticket yet.")
        return redirect(registration_url(registration))
    if ticket is None:
        messages.info(request, "Your ticket is being prepared.")
        return redirect(registration_url(registration))
    return render(request, "tickets/ticket.html", {"registration": registration, "ticket": ticket})


@require_GET
@never_cache  # the secret is in the URL: no cache may keep the page
def ticket_download(request, code: str, secret: str):
    registration = guest_registration(code, secret)
    ticket = registration.tickets_in_order().first()
    if registration.seat == Seat.CANCELLED:
        raise Http404("This registration is cancelled; its ticket is no longer valid.")
    if ticket is None:
        raise Http404("The ticket is not ready yet.")
    response = HttpResponse(pdf.render(ticket), content_type="application/pdf")
    filename = f"nightjar-ticket-{registration.code}-{ticket.number}.pdf"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def healthz_live(request):
    """Liveness: 200 as long as this process can serve a request. Nothing else
    is asked: a web process with the broker down still takes registrations,
    so restarting it would help nobody."""
    response = JsonResponse({"status": "ok"})
    response["Cache-Control"] = "no-store"
    return response


# /healthz/ready is anonymous: its answer is kept NIGHTJAR_HEALTH_CACHE_SECONDS
# per process, so a client polling it in a loop costs one broker connection a
# second, not hundreds.
_health: tuple[float, dict[str, str]] | None = None
clock = time.monotonic


def cached_dependency_health() -> dict[str, str]:
    global _health
    now = clock()
    if _health is None or not 0 <= now - _health[0] < settings.NIGHTJAR_HEALTH_CACHE_SECONDS:
        _health = (now, dependency_health())
    return _health[1]


def healthz_ready(request):
    """Readiness and dependencies: 200 when the database and the broker
    answer, 503 otherwise; no details that could leak hosts or passwords (the
    reason goes to the log). `/healthz` answers the same, as it always did.
    The answer may be up to NIGHTJAR_HEALTH_CACHE_SECONDS old."""
    checks = cached_dependency_health()
    healthy = all(value == "ok" for value in checks.values())
    response = JsonResponse({"status": "ok" if healthy else "unavailable", **checks}, status=200 if healthy else 503)
    response["Cache-Control"] = "no-store"
    return response
