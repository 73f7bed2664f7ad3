"""The door's pages and its JSON endpoints. Staff only: the door page and the
scan endpoints need `door.check_in`; arrivals need `door.view_checkin`; an
undo needs `door.change_checkin` and a reason. Each view calls one service."""

import functools
import logging
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from door import conf, services
from nightjar.ratelimit import count
from nightjar_delivery import ContractError, actor, load_json

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024  # one scan is ~200 bytes; a sync of MAX_SYNC scans fits
MAX_SYNC = 200


def refused(request, permission: str):
    """Who may not: anonymous users sign in first; staff without the permission
    get a page that says why and leads somewhere they may go."""
    if not request.user.is_authenticated or not request.user.is_staff:
        return redirect_to_login(request.get_full_path(), "admin:login")
    if request.user.has_perm(permission):
        return None
    return refusal_page(request, permission)


def refusal_page(request, permission: str, sentence: str = ""):
    return render(
        request,
        "door/refused.html",
        {
            "sentence": sentence
            or (
                "The door needs the permission “Can check guests in at the door” (door.check_in)."
                if permission == "door.check_in"
                else f"This page needs the permission {permission}."
            ),
            "may_check_in": request.user.has_perm("door.check_in"),
            "may_view": request.user.has_perm("door.view_checkin"),
        },
        status=403,
    )


def json_post(view):
    """A door endpoint: POST only, answered in JSON with a sentence for a
    wrong method too (never Django's empty 405)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            response = JsonResponse({"error": f"Send a POST (JSON), not a {request.method[:10]}."}, status=405)
            response["Allow"] = "POST"
            return response
        return view(request, *args, **kwargs)

    return wrapped


def json_refused(request, permission: str):
    if not request.user.is_authenticated or not request.user.is_staff:
        return JsonResponse({"error": "Sign in as staff (the admin's login) first."}, status=401)
    if not request.user.has_perm(permission):
        return JsonResponse({"error": f"This needs the permission {permission}."}, status=403)
    return None


def scans_allowed(request, scans: int) -> int:
    """How many of these scans one staff user may still send this minute
    (NIGHTJAR_DOOR_SCANS_PER_MINUTE, each scan counted, shared by every web
    process: nightjar/ratelimit.py)."""
    limit = conf.scans_per_minute()
    if not limit:
        return scans
    total = count(f"nightjar:door:{request.user.pk}", scans)
    return max(0, min(scans, limit - (total - scans)))


def scanner(request) -> str:
    """Who scans (Scan.by): the staff user's name, compared between a phone's
    scans (a resent one by someone else is refused). Not a trail's spelling
    (nightjar_delivery.actor): a scan queued before an upgrade must still match."""
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
        actor=scanner(request),
        door=body.get("door") or "",
        scanned=scanned_at(body.get("scanned_at")),
        offline=body.get("offline") is True,
        admitted=body.get("admitted") is True,
        typed=body.get("typed") is True,
        code_sha256=body.get("code_sha256"),
    )


class BadBody(Exception):
    """The request's body is no JSON object the door can read; str() says why."""


def read_json(request) -> dict:
    """The body as a JSON object, read as the engine reads a message
    (nightjar_delivery.codec: strict, total — deep nesting is a refusal, not a 500)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    try:
        too_big = length > MAX_BODY or len(request.body) > MAX_BODY
    except RequestDataTooBig:  # past Django's own DATA_UPLOAD_MAX_MEMORY_SIZE
        too_big = True
    if too_big:
        raise BadBody(f"The body is over {MAX_BODY // 1024} KB: send at most {MAX_SYNC} scans at a time.")
    try:
        body = load_json(request.body)
    except ContractError as error:
        raise BadBody(str(error)) from None
    if not isinstance(body, dict):
        raise BadBody("Send one JSON object.")
    return body


def too_many() -> JsonResponse:
    response = JsonResponse({"error": "Too many scans from this staff user; wait a minute."}, status=429)
    response["Retry-After"] = "60"
    return response


@require_GET
@never_cache
def door_page(request):
    if answer := refused(request, "door.check_in"):
        return answer
    return render(
        request,
        "door/door.html",
        {
            "door_name": request.GET.get("door", "")[:40],
            "may_view_arrivals": request.user.has_perm("door.view_checkin"),
            "max_sync": MAX_SYNC,
            "scans_per_minute": conf.scans_per_minute(),
            "user_key": services.door_user_key(request.user.pk),
        },
    )


@json_post
@never_cache
def scan_json(request):
    """One scan: {"scan_id", "code", "door", optional "scanned_at", "offline", "admitted", "typed"}."""
    if answer := json_refused(request, "door.check_in"):
        return answer
    if not scans_allowed(request, 1):
        return too_many()
    try:
        body = read_json(request)
    except BadBody as error:
        return JsonResponse({"error": f"{error} Send one JSON object: scan_id, code, door."}, status=400)
    try:
        return JsonResponse(one_scan(request, body).as_json())
    except services.DoorError as error:
        return JsonResponse({"error": str(error)}, status=400)


@json_post
@never_cache
def sync_json(request):
    """Scans a door made offline: {"scans": [scan, ...]}, answered in order,
    the admitted ones recorded first, each on its own: a scan that cannot be checked gets its own error (and
    "retry": true when sending it again may help), never the batch's. Sending
    the same list again changes nothing (each scan has its id)."""
    if answer := json_refused(request, "door.check_in"):
        return answer
    try:
        body = read_json(request)
    except BadBody as error:
        return JsonResponse({"error": f"{error} Send {{'scans': [...]}}.", "max_scans": MAX_SYNC}, status=400)
    scans = body.get("scans")
    if not isinstance(scans, list) or len(scans) > MAX_SYNC:
        return JsonResponse(
            {"error": f"Send {{'scans': [...]}} with at most {MAX_SYNC} scans.", "max_scans": MAX_SYNC}, status=400
        )
    allowed = scans_allowed(request, len(scans))
    if scans and not allowed:
        return too_many()
    # The scans whose guests the phone let in first, then the rest, each in queue
    # order: within the limit an admitted guest is checked in on the server before
    # any scan that admitted nobody (another door online would let them in again),
    # and a later scan of the same ticket finds its check-in. Answered in the order sent.
    first = sorted(
        range(len(scans)), key=lambda n: not (isinstance(scans[n], dict) and scans[n].get("admitted") is True)
    )
    answers: list = [None] * len(scans)
    for place, number in enumerate(first):
        answers[number] = sync_answer(request, scans[number], within_limit=place < allowed)
    return JsonResponse({"answers": answers, "max_scans": MAX_SYNC})


def sync_answer(request, scan, *, within_limit: bool) -> dict:
    """One scan of a sync: its answer, or its own error."""
    scan_id = scan.get("scan_id") if isinstance(scan, dict) else None
    scan_id = scan_id if isinstance(scan_id, str) and len(scan_id) <= 64 else None
    if not within_limit:
        return {"scan_id": scan_id, "error": "Too many scans this minute: sent again later.", "retry": True}
    if not isinstance(scan, dict):
        return {"scan_id": None, "error": "A scan is a JSON object: scan_id, code, door."}
    try:
        return one_scan(request, scan).as_json()
    except services.DoorError as error:
        return {"scan_id": scan_id, "error": str(error)}
    except Exception:  # one scan's failure (the database, say) is that scan's answer
        logger.exception("A door scan in a sync could not be recorded")
        return {"scan_id": scan_id, "error": "This scan could not be recorded now.", "retry": True}


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
            return refusal_page(request, "door.change_checkin", "Undoing a check-in needs door.change_checkin.")
        try:
            check_in = services.undo_check_in(
                ticket=request.POST.get("ticket", ""),
                actor=actor(request, where="door"),
                reason=request.POST.get("reason", ""),
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
