"""CSRF refusals in the words their client reads: a door phone's JSON
endpoints get JSON (a stale token after signing out and in again elsewhere
is "signed out: reload", which the page must never take for "offline");
pages get Django's own page."""

from django.http import JsonResponse
from django.views import csrf


def csrf_failure(request, reason: str = ""):
    if request.path.endswith(".json") or "application/json" in request.headers.get("Content-Type", ""):
        return JsonResponse(
            {
                "error": "This page's security token is no longer valid (signed out, or signed in again "
                "elsewhere): reload the page. Nothing was recorded.",
                "signed_out": True,
            },
            status=403,
        )
    return csrf.csrf_failure(request, reason)
