"""Signing out ends a staff session on the server. Sessions are signed
cookies (a guest's list of registrations needs no database write), which
the server cannot revoke: a cookie copied before sign-out still signed its
holder in for two weeks. So each sign-in also writes a random token to the
session and a StaffSession row; sign-out deletes the row; and a signed-in
request whose token has no row is signed out (StaffSessionMiddleware, one
indexed read per signed-in request; guests pay nothing)."""

import secrets

from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.dispatch import receiver

from nightjar.models import StaffSession

TOKEN = "nightjar_staff_session"


@receiver(user_logged_in, dispatch_uid="nightjar-staff-session-begins")
def begin(sender, request, user, **kwargs) -> None:
    token = secrets.token_urlsafe(32)
    StaffSession.objects.create(token=token, user=user)
    request.session[TOKEN] = token


@receiver(user_logged_out, dispatch_uid="nightjar-staff-session-ends")
def end(sender, request, user, **kwargs) -> None:
    token = request.session.get(TOKEN) if request is not None else None
    if token:
        StaffSession.objects.filter(token=token).delete()


class StaffSessionMiddleware:
    """After AuthenticationMiddleware: a signed-in session whose server-side
    row is gone (signed out elsewhere, or a cookie from before) is signed out."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            token = request.session.get(TOKEN)
            if not token or not StaffSession.objects.filter(token=token, user_id=user.pk).exists():
                logout(request)
        return self.get_response(request)
