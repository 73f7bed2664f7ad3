"""Signing out ends a staff session on the server. Sessions are signed
cookies (a guest's list of registrations needs no database write), which
the server cannot revoke: a cookie copied before sign-out still signed its
holder in for two weeks. So each sign-in also writes a random token to the
session and a StaffSession row; sign-out deletes the row; and a signed-in
request whose token has no row is signed out (StaffSessionMiddleware, one
indexed read per signed-in request, a write at most once a minute for "last
seen"; guests pay nothing).

Rows of sessions nobody signed out of are swept as the rate limit's are: each
sign-in forgets up to 100 whose cookie has expired. Staff with the permission
list the sessions and end one (the admin's Staff sessions), which signs its
cookie out at its next request: what a lost door phone needs."""

import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from nightjar.middleware import client_address
from nightjar.models import StaffSession
from tickets.services.staff import record_staff_action  # the site's staff trail

TOKEN = "nightjar_staff_session"
SEEN_EVERY = timedelta(seconds=60)  # how stale "last seen" may be: one write a minute per session
SWEPT = 100  # rows forgotten per sign-in, at most: a sign-in adds one


def expired_before():
    """A row not seen since then has no cookie left that could carry it: a
    session's cookie is saved only by requests, each of which refreshes
    last_seen (to within SEEN_EVERY), and lives SESSION_COOKIE_AGE after that."""
    return timezone.now() - timedelta(seconds=settings.SESSION_COOKIE_AGE) - SEEN_EVERY


def sweep_expired() -> int:
    """Forget up to SWEPT rows whose cookie has expired; returns how many."""
    old = StaffSession.objects.filter(last_seen__lt=expired_before()).values_list("pk", flat=True)[:SWEPT]
    return StaffSession.objects.filter(pk__in=list(old)).delete()[0]


@receiver(user_logged_in, dispatch_uid="nightjar-staff-session-begins")
def begin(sender, request, user, **kwargs) -> None:
    token = secrets.token_urlsafe(32)
    StaffSession.objects.create(token=token, user=user, address=client_address(request)[:64])
    request.session[TOKEN] = token
    sweep_expired()


@receiver(user_logged_out, dispatch_uid="nightjar-staff-session-ends")
def end(sender, request, user, **kwargs) -> None:
    token = request.session.get(TOKEN) if request is not None else None
    if token:
        StaffSession.objects.filter(token=token).delete()


def end_staff_session(*, token: str, actor: str) -> str:
    """Staff: end a signed-in session (its cookie is signed out at its next
    request), with a line in the staff trail. Returns what was done, or that
    it had ended already (signed out meanwhile)."""
    with transaction.atomic():
        session = StaffSession.objects.select_related("user").select_for_update().filter(token=token).first()
        if session is None:
            return "That session had ended already (signed out, or ended by other staff); nothing changed."
        described = describe(session)
        session.delete()
        record_staff_action(actor=actor, action="end session", registration=None, detail=f"Ended {described}.")
    return f"Ended {described}: it is signed out at its next request."


def describe(session: StaffSession) -> str:
    started = timezone.localtime(session.started)
    return f"the session of {session.user.get_username()} (signed in {started:%Y-%m-%d %H:%M}, from {session.address or 'an unknown address'})"


class StaffSessionMiddleware:
    """After AuthenticationMiddleware: a signed-in session whose server-side
    row is gone (signed out elsewhere, ended by staff, or a cookie from
    before) is signed out; one still there is marked seen, once a minute."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            token = request.session.get(TOKEN)
            rows = StaffSession.objects.filter(token=token, user_id=user.pk) if token else StaffSession.objects.none()
            seen = rows.values_list("last_seen", flat=True).first()
            if seen is None:
                logout(request)
            elif timezone.now() - seen > SEEN_EVERY:
                rows.update(last_seen=timezone.now(), address=client_address(request)[:64])
        return self.get_response(request)
