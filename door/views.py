"""The door's pages and its JSON endpoints. Staff only: the door page and the
scan endpoints need `door.check_in`; arrivals need `door.view_checkin`; an
undo needs `door.change_checkin` and a reason. Each view calls one service."""

import json
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from door import conf, services
from nightjar.ratelimit import over_limit

MAX_BODY = 64 * 1024  # one scan is ~200 bytes; a sync of MAX_SYNC scans fits
MAX_SYNC = 200


def refused(request, permission: str):
    """Who may not: anonymous users sign in first; staff without the permission hear why."""
    if not request.user.is_authenticated or not request.user.is_staff:
        return redirect_to_login(request.get_full_path(), "admin:login")
    if request.user.has_perm(permission):
        return None
    return HttpResponse(
        "The door needs the permission “Can check guests in at the door” (door.check_in); "
        "staff who may view check-ins see the arrivals at /door/arrivals/.\n"
        if permission == "door.check_in"
        else f"This page needs the permission {permission}.\n",
        status=403,
        content_type="text/plain; charset=utf-8",
    )


def json_refused(request, permission: str):
    if not request.user.is_authenticated or not request.user.is_staff:
        return JsonResponse({"error": "Sign in as staff (the admin's login) first."}, status=401)
    if not request.user.has_perm(permission):
        return JsonResponse({"error": f"This needs the permission {permission}."}, status=403)
    return None


def over_rate_limit(request) -> bool:
    """One staff user's scans this minute, past NIGHTJAR_DOOR_SCANS_PER_MINUTE."""
    return over_limit(f"nightjar:door:{request.user.pk}", conf.scans_per_minute())


def actor(request) -> str:
    return request.user.get_username()


def scanned_at(value) -> datetime | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def one_scan(request, body: dict) -> services.Answer:
    return services.scan_ticket(
        code=body.get("code"),
        scan_id=body.get("scan_id"),
        actor=actor(request),
        door=body.get("door") or "",
        scanned=scanned_at(body.get("scanned_at")),
        offline=body.get("offline") is True,
        admitted=body.get("admitted") is True,
        typed=body.get("typed") is True,
    )


def read_json(request):
    if len(request.body) > MAX_BODY:
        return None
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def too_many() -> JsonResponse:
    response = JsonResponse({"error": "Too many scans from this staff user; wait a minute."}, status=429)
    response["Retry-After"] = "60"
    return response


@require_GET
@never_cache
def door_page(request):
    if answer := refused(request, "door.check_in"):
        return answer
    return render(request, "door/door.html", {"door_name": request.GET.get("door", "")[:40]})


@require_POST
@never_cache
def scan_json(request):
    """One scan: {"scan_id", "code", "door", optional "scanned_at", "offline", "admitted", "typed"}."""
    if answer := json_refused(request, "door.check_in"):
        return answer
    if over_rate_limit(request):
        return too_many()
    body = read_json(request)
    if body is None:
        return JsonResponse({"error": "Send one JSON object: scan_id, code, door."}, status=400)
    try:
        return JsonResponse(one_scan(request, body).as_json())
    except services.DoorError as error:
        return JsonResponse({"error": str(error)}, status=400)


@require_POST
@never_cache
def sync_json(request):
    """Scans a door made offline: {"scans": [scan, ...]}, answered in order.
    Sending the same list again changes nothing (each scan has its id)."""
    if answer := json_refused(request, "door.check_in"):
        return answer
    if over_rate_limit(request):
        return too_many()
    body = read_json(request)
    scans = body.get("scans") if body else None
    if not isinstance(scans, list) or len(scans) > MAX_SYNC or not all(isinstance(s, dict) for s in scans):
        return JsonResponse({"error": f"Send {{'scans': [...]}} with at most {MAX_SYNC} scans."}, status=400)
    answers = []
    for scan in scans:
        try:
            answers.append(one_scan(request, scan).as_json())
        except services.DoorError as error:
            answers.append({"scan_id": scan.get("scan_id"), "error": str(error)})
    return JsonResponse({"answers": answers})


@require_GET
@never_cache
def tickets_json(request):
    """The digests an offline door judges by (never the secrets)."""
    if answer := json_refused(request, "door.check_in"):
        return answer
    return JsonResponse(services.valid_digests())


@require_http_methods(["GET", "POST"])
@never_cache
def arrivals_page(request):
    if answer := refused(request, "door.view_checkin"):
        return answer
    if request.method == "POST":
        if not request.user.has_perm("door.change_checkin"):
            return HttpResponse("Undoing a check-in needs door.change_checkin.\n", status=403)
        try:
            check_in = services.undo_check_in(
                ticket=request.POST.get("ticket", ""), actor=actor(request), reason=request.POST.get("reason", "")
            )
        except services.DoorError as error:
            messages.error(request, str(error))
        else:
            messages.success(request, f"The check-in of {check_in.ticket.number} was undone.")
        return redirect("door-arrivals")
    seen = services.arrivals()
    peak = max((count for _, count in seen.per_minute), default=0)
    return render(
        request,
        "door/arrivals.html",
        {
            "arrivals": seen,
            "bars": [(minute, count, round(100 * count / peak)) for minute, count in seen.per_minute],
            "may_undo": request.user.has_perm("door.change_checkin"),
            "may_check_in": request.user.has_perm("door.check_in"),
        },
    )
