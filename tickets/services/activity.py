"""Activity over time for the desk's charts, from the database's own
timestamps (Registration.created, Ticket.issued)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from tickets.models import Registration, Ticket


@dataclass
class Activity:
    """One chart window: per bucket, registrations and tickets per minute and
    registration → ticket latency (p50, p99, seconds) of the tickets issued in it."""

    start: datetime
    bucket_seconds: int
    registrations: list[float]
    tickets: list[float]
    p50: list[float | None]
    p99: list[float | None]
    read_at: datetime

    @property
    def totals(self) -> tuple[int, int]:
        per_bucket = self.bucket_seconds / 60
        return round(sum(self.registrations) * per_bucket), round(sum(self.tickets) * per_bucket)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return values[min(len(values) - 1, max(0, int(fraction * len(values) + 0.999999) - 1))]


def activity(*, window: timedelta, bucket_seconds: int, now=None) -> Activity:
    """Registrations and tickets per minute and ticket latency over a window,
    from Registration.created and Ticket.issued (first ticket per registration)."""
    now = now or timezone.now()
    count = int(window.total_seconds() // bucket_seconds)
    start = now - timedelta(seconds=count * bucket_seconds)

    def bucket(at) -> int:
        return min(count - 1, int((at - start).total_seconds() // bucket_seconds))

    registrations = [0] * count
    for created in Registration.objects.filter(created__gte=start).values_list("created", flat=True).iterator():
        registrations[bucket(created)] += 1
    tickets = [0] * count
    waits: list[list[float]] = [[] for _ in range(count)]
    issued = Ticket.objects.filter(issued__gte=start).values_list("issued", "registration__created")
    for issued_at, created in issued.iterator():
        index = bucket(issued_at)
        tickets[index] += 1
        waits[index].append(max(0.0, (issued_at - created).total_seconds()))
    per_minute = 60 / bucket_seconds
    for values in waits:
        values.sort()
    return Activity(
        start=start,
        bucket_seconds=bucket_seconds,
        registrations=[n * per_minute for n in registrations],
        tickets=[n * per_minute for n in tickets],
        p50=[percentile(values, 0.50) if values else None for values in waits],
        p99=[percentile(values, 0.99) if values else None for values in waits],
        read_at=now,
    )
