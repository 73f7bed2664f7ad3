"""A limit on failed sign-ins to the admin (the desk and the door sign in
there too): /admin/login/ took 100 wrong passwords for a door volunteer's
account from one address, 100 × 200. Counted in the database per minute
(nightjar/ratelimit.py), failures only:

- per client address: past NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE, that address's
  sign-ins get a 429 with a sentence until the minute is over;
- per username, across addresses (a guess spread over many machines): past the
  same limit, the username is refused only to addresses that have themselves
  failed this minute, so a sign-in from elsewhere is never blocked by another
  address's failures.
"""

from django.conf import settings
from django.contrib import admin
from django.shortcuts import render

from nightjar.middleware import client_address
from nightjar.ratelimit import count, peek


def keys(request) -> tuple[str, str, str]:
    """This POST's counters: its address, its username, both together."""
    address = client_address(request)
    username = request.POST.get("username", "").strip().lower()[:100]
    return (
        f"nightjar:signin:address:{address}",
        f"nightjar:signin:user:{username}",
        f"nightjar:signin:user:{username}:address:{address}",
    )


def refused(request, sentence: str):
    response = render(
        request, "admin/too_many_signins.html", {"sentence": sentence, "title": "Too many sign-ins"}, status=429
    )
    response["Retry-After"] = "60"
    return response


def sign_in(request, extra_context=None):
    """The admin's own login view, behind the limit of failed sign-ins."""
    limit = settings.NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE
    if request.method != "POST" or not limit:
        return admin.site.login(request, extra_context)
    by_address, by_user, by_both = keys(request)
    if peek(by_address) >= limit:
        return refused(request, "Too many failed sign-ins from this address; wait a minute, then try again.")
    if peek(by_user) >= limit and peek(by_both):
        return refused(
            request,
            "Too many failed sign-ins for this username; wait a minute, then try again with the right password.",
        )
    response = admin.site.login(request, extra_context)
    # The form shown again (200) is a wrong username or password; a 302 is a sign-in, a 403 a CSRF refusal.
    if response.status_code == 200 and not request.user.is_authenticated:
        for key in (by_address, by_user, by_both):
            count(key)
    return response
