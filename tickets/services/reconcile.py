"""Reconcile: pending registrations older than a grace period are published
again, oldest first, after the broker's dead letters are collected (parking)."""

import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from tickets.models import Registration, StaffAction
from tickets.services.parking import CollectReport, collect_dead_letters
from tickets.services.registrations import pending_registrations, publish_registration


@dataclass
class ReconcileReport:
    published: list[str] = field(default_factory=list)
    remaining: int = 0
    passes: int = 0
    collected: "CollectReport | None" = None


RECONCILE_ACTOR = "nightjar (reconcile)"


def reconcile_registrations(
    *,
    limit: int = 100,
    older_than: float = 60,
    catch_up: bool = True,
    max_seconds: float = 300,
    actor: str = RECONCILE_ACTOR,
) -> ReconcileReport:
    """Republish pending registrations older than the grace period, oldest
    first, `limit` per pass. First moves what the broker dead-lettered into the
    database (collect_dead_letters), so a parked registration is never
    republished behind staff's back. With catch_up, passes repeat while each
    one is full, so a backlog drains as fast as the broker confirms (each
    publish waits for its confirm) — bounded by max_seconds. Raises BrokerError
    when the broker stops confirming; what was published stays published, and
    each republish is in the registration's history (one statement per pass)."""
    report = ReconcileReport(collected=collect_dead_letters())
    cutoff = timezone.now() - timedelta(seconds=older_than)
    due = pending_registrations().filter(created__lte=cutoff)
    started = time.monotonic()
    rest = due  # keyset cursor: what comes after the last one published, oldest first
    while True:
        registrations = list(rest[:limit])
        published = []
        try:
            for registration in registrations:
                publish_registration(registration)
                report.published.append(registration.code)
                published.append(registration)
        finally:
            _record_republished(published, actor=actor, older_than=older_than)
        report.passes += 1
        if registrations:
            last = registrations[-1]
            rest = due.filter(Q(created__gt=last.created) | Q(created=last.created, id__gt=last.pk))
        if not catch_up or len(registrations) < limit or time.monotonic() - started > max_seconds:
            break
    report.remaining = rest.count()
    return report


def _record_republished(registrations: list[Registration], *, actor: str, older_than: float) -> None:
    detail = f"Reconcile published it again (no ticket {older_than:g} s after registering)."
    StaffAction.objects.bulk_create(
        StaffAction(actor=actor[:150], action="republish", registration=registration, detail=detail)
        for registration in registrations
    )
