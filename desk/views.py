"""The operations desk's pages: the dashboard (totals, the broker, workers
and two charts, read at one moment), the reconcile and audit buttons, and
the Prometheus scrape. Each calls the same service as its command; the
permissions are the registrations' (view to read, change to reconcile)."""

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from desk import charts
from door.services import arrivals
from mail.models import Kind
from mail.outbox import mail_activity, outbox_counts
from nightjar_delivery import actor, describe_replicas, transport
from nightjar_tasks import schedules as tasks_schedules
from nightjar_tasks import summary as tasks_summary
from tickets.models import Registration
from tickets.services import seats
from tickets.services.activity import activity
from tickets.services.audit import audit_invariants
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import pending_registrations
from tickets.services.status import delivery_status
from tickets.services.workers import worker_counts, worker_reports

# The staff desk's two windows: (title, window, bucket).
WINDOWS = (("Last hour", timedelta(hours=1), 60), ("Last day", timedelta(days=1), 900))


def registrations_admin():
    """Whose permissions the desk asks: the registrations' ModelAdmin."""
    return admin.site.get_model_admin(Registration)


def dashboard(request):
    """The operations desk: totals, the broker, workers and two charts,
    read at one moment. `?fragment=1` is the part desk.js refreshes."""
    if not registrations_admin().has_view_permission(request):
        raise PermissionDenied
    status = delivery_status()
    context = {
        **admin.site.each_context(request),
        "title": "Delivery status",
        "status": status,
        "oldest": pending_registrations().first(),
        "stream_maxlen": f"{settings.NIGHTJAR_STREAM_MAXLEN:,}",
        "replicas": describe_replicas(status.queue),
        "workers": worker_reports(),
        "worker_counts": worker_counts(),
        "gone_after": settings.NIGHTJAR_WORKER_GONE_SECONDS,
        "charts": [desk_charts(title, window, bucket) for title, window, bucket in WINDOWS],
        "registrations_url": reverse("admin:tickets_registration_changelist"),
        "can_reconcile": registrations_admin().has_change_permission(request),
        "opts": Registration._meta,
        "arrivals": desk_arrivals() if request.user.has_perm("door.view_checkin") else None,
        "seats": desk_seats(),
        "mail": desk_mail() if request.user.has_perm("mail.view_mail") else None,
        # Django tasks on Nightjar's backend, per task path (none: no block).
        "tasks": tasks_summary.by_task_path(),
        "schedules": desk_schedules(),
    }
    context["read_at"] = context["charts"][0]["read_at"]
    # admin_view already says no-store: every read is fresh.
    template = "admin/tickets/desk_body.html" if request.GET.get("fragment") else "admin/tickets/delivery_status.html"
    return TemplateResponse(request, template, context)


def desk_schedules() -> list[tuple]:
    """NIGHTJAR_TASKS_SCHEDULE's schedules and their next slots (none, or
    one that cannot run: no block; check nightjar_tasks.E010 says why)."""
    try:
        found = tasks_schedules.all_schedules()
    except ValueError:
        return []
    now = timezone.now()
    return [(schedule, schedule.following(now)) for schedule in found]


def reconcile_now(request):
    """The reconcile button: the same service as `manage.py reconcile`,
    bounded so the request answers (what remains is said)."""
    if request.method != "POST":
        return redirect("admin:tickets_delivery_status")
    if not registrations_admin().has_change_permission(request):
        raise PermissionDenied
    try:
        report = reconcile_registrations(max_seconds=10, actor=actor(request))
    except transport.BrokerError as error:
        messages.error(request, f"Reconcile stopped: {error}")
        return redirect("admin:tickets_delivery_status")
    collected = report.collected
    messages.success(
        request,
        f"Reconcile republished {len(report.published)} registration(s), {report.remaining} still due; "
        f"dead letters: {len(collected.parked)} parked, {len(collected.requeued)} requeued, "
        f"{collected.dropped} already done, {collected.rejected} rejected.",
    )
    return redirect("admin:tickets_delivery_status")


def audit_now(request):
    """The audit button: the promise checked row by row, as `manage.py audit`."""
    if request.method != "POST":
        return redirect("admin:tickets_delivery_status")
    if not registrations_admin().has_view_permission(request):
        raise PermissionDenied
    report = audit_invariants()
    if report.passed:
        messages.success(
            request,
            f"Audit passed: {report.checked} registrations checked, every ticket once; {report.parked} parked.",
        )
    for violation in report.violations:
        messages.error(request, f"Audit: {violation}")
    return redirect("admin:tickets_delivery_status")


def desk_charts(title: str, window: timedelta, bucket: int) -> dict:
    seen = activity(window=window, bucket_seconds=bucket)
    registrations, tickets = seen.totals
    worst = max((value for value in seen.p99 if value is not None), default=None)
    per = "per minute" if bucket == 60 else f"per minute, averaged over {bucket // 60} minutes"
    rate_summary = f"{registrations:,} registrations and {tickets:,} tickets, {per}."
    latency_summary = (
        f"Slowest p99: {charts.label(worst, 's')} (registration stored to ticket issued)."
        if worst is not None
        else "No tickets in this window."
    )
    common = {"start": seen.start, "bucket_seconds": bucket}
    return {
        "title": title,
        "read_at": seen.read_at,
        "rates": charts.line_chart(
            title=f"{title}: registrations and tickets per minute",
            series=[
                ("registrations", seen.registrations, "series-a", "bars"),
                ("tickets", seen.tickets, "series-b", "line"),
            ],
            summary=rate_summary,
            **common,
        ),
        "latency": charts.line_chart(
            title=f"{title}: registration → ticket latency",
            series=[("p50", seen.p50, "series-a", "line"), ("p99", seen.p99, "series-c", "line")],
            unit="s",
            summary=latency_summary,
            **common,
        ),
    }


def desk_seats(*, window: timedelta = timedelta(days=1), bucket: int = 900) -> dict:
    """The evening's seats: taken, free, waiting, cancelled, and a chart of
    cancellations and promotions over the last day."""
    seen = seats.seat_activity(window=window, bucket_seconds=bucket)
    return {
        "counts": seats.seat_counts(),
        "chart": charts.line_chart(
            title="Last day: cancellations and promotions from the waiting list",
            series=[
                ("cancellations", seen.cancelled, "series-a", "bars"),
                ("promotions", seen.promoted, "series-b", "line"),
            ],
            summary=f"{sum(seen.cancelled)} cancellations and {sum(seen.promoted)} promotions, per 15 minutes.",
            start=seen.start,
            bucket_seconds=bucket,
        ),
    }


def desk_mail(*, window: timedelta = timedelta(days=1), bucket: int = 900) -> dict:
    """The guests' mail outbox: per state and kind, and a chart of mails
    stored and sent over the last day."""
    counts = outbox_counts()
    seen = mail_activity(window=window, bucket_seconds=bucket)
    return {
        "counts": counts,
        "totals": {state: counts.total(state) for state in counts.by_state},
        "rows": [
            {
                "label": label,
                "counts": [counts.by_state[state][kind] for state in ("sent", "waiting", "retrying", "failed")],
            }
            for kind, label in Kind.choices
        ],
        "url": reverse("admin:mail_mail_changelist"),
        "chart": charts.line_chart(
            title="Last day: guests' mails stored and sent",
            series=[("stored", seen.stored, "series-a", "bars"), ("sent", seen.sent, "series-b", "line")],
            summary=f"{sum(seen.stored)} mails stored and {sum(seen.sent)} sent, per 15 minutes.",
            start=seen.start,
            bucket_seconds=bucket,
        ),
    }


def desk_arrivals(*, hour: timedelta = timedelta(hours=1), listed: int = 10) -> dict:
    """The door's evening on the desk: checked in N of M, arrivals per minute
    over the last hour, the first few who have not arrived, the conflicts."""
    seen = arrivals(not_arrived_limit=listed)
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - hour + timedelta(minutes=1)
    counts = dict(seen.per_minute)
    per_minute = [counts.get(start + timedelta(minutes=index), 0) for index in range(int(hour.total_seconds() // 60))]
    return {
        "seen": seen,
        "waiting": seen.expected - seen.checked_in,
        "not_arrived": seen.not_arrived[:listed],
        "chart": charts.line_chart(
            title="Last hour: arrivals at the door per minute",
            series=[("check-ins", per_minute, "series-a", "bars")],
            start=start,
            bucket_seconds=60,
            summary=f"{sum(per_minute):,} check-ins in the last hour; {seen.checked_in:,} of {seen.expected:,} in all.",
        ),
    }
