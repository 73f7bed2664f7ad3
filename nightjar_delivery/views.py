"""The engine's one view: Prometheus scrapes of the process's metrics and
the registered users' gauges. A project routes it where it likes:

    path("metrics", include("nightjar_delivery.urls"))    # or the view itself, with a permission:
    path("metrics", nightjar_delivery.views.metrics, {"permission": "myapp.view_report"})
"""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from nightjar_delivery import metrics as engine_metrics


@require_GET
@never_cache
def metrics(request: HttpRequest, permission: str = "") -> HttpResponse:
    """Staff signed in (holding `permission`, when the URL names one), or
    `Authorization: Bearer <NIGHTJAR_METRICS_TOKEN>`. Anyone else gets 403
    and no numbers; without prometheus-client, a 501 that says which extra."""
    staff = request.user.is_staff and (not permission or request.user.has_perm(permission))
    if not staff and not engine_metrics.token_matches(request.headers.get("Authorization", "")):
        who = f"staff with the permission {permission}" if permission else "staff"
        return HttpResponse(
            f"Metrics are for {who}: sign in to the admin, or send Authorization: Bearer <NIGHTJAR_METRICS_TOKEN>.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    if not engine_metrics.AVAILABLE:
        return HttpResponse(engine_metrics.UNAVAILABLE + "\n", status=501, content_type="text/plain; charset=utf-8")
    body, content_type = engine_metrics.exposition(desk=True)
    return HttpResponse(body, content_type=content_type)
