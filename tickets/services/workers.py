"""What the workers say about themselves (their reports), for the desk's
worker list and counts."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from tickets.models import WorkerReport


def worker_counts(*, within: timedelta = timedelta(days=1)) -> dict[str, int]:
    """How many workers seen lately are running, gone or stopped."""
    now = timezone.now()
    recent = WorkerReport.objects.filter(last_seen__gte=now - within)
    fresh = now - timedelta(seconds=settings.NIGHTJAR_WORKER_GONE_SECONDS)
    counts = {
        "stopped": recent.filter(stopped__isnull=False).count(),
        "running": recent.filter(stopped__isnull=True, last_seen__gte=fresh).count(),
        "gone": recent.filter(stopped__isnull=True, last_seen__lt=fresh).count(),
    }
    return {**counts, "total": sum(counts.values())}


def worker_reports(*, within: timedelta = timedelta(days=1), limit: int = 50) -> list[WorkerReport]:
    """Workers seen lately, running ones first; each with .state_now."""
    now = timezone.now()
    rows = list(WorkerReport.objects.filter(last_seen__gte=now - within).order_by("-last_seen")[:limit])
    for row in rows:
        row.state_now = row.state(now, gone_after=settings.NIGHTJAR_WORKER_GONE_SECONDS)
        row.seen_seconds_ago = max(0, round((now - row.last_seen).total_seconds()))
    order = {"running": 0, "gone": 1, "stopped": 2}
    return sorted(rows, key=lambda row: order[row.state_now])
