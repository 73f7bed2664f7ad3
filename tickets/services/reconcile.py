"""Reconcile and parking for registrations: the engine's passes
(nightjar_delivery/reconcile.py) on the registrations channel. Pending registrations
older than a grace period are published again, oldest first, after the
broker's dead letters are collected (parked for staff, published again once,
or rejected); staff requeue or discard what is parked."""

from nightjar_delivery import channel, reconcile
from nightjar_delivery.reconcile import RECONCILE_ACTOR, CollectReport, ReconcileReport
from tickets.models import Registration

__all__ = ["CollectReport", "ReconcileReport", "RECONCILE_ACTOR"]


def registrations_channel() -> channel.Channel:
    return channel.get("registrations")


def reconcile_registrations(**options) -> ReconcileReport:
    """nightjar_delivery.reconcile.reconcile (limit, older_than, catch_up, max_seconds, actor)."""
    return reconcile.reconcile(registrations_channel(), **options)


def collect_dead_letters(**options) -> CollectReport:
    return reconcile.collect_dead_letters(registrations_channel(), **options)


def requeue_parked(*, code: str, actor: str) -> Registration:
    """Staff: publish a parked registration again; raises NightjarError."""
    return reconcile.requeue_parked(registrations_channel(), code=code, actor=actor)


def discard_parked(*, code: str, actor: str) -> Registration:
    """Staff: give up on a parked registration; raises NightjarError."""
    return reconcile.discard_parked(registrations_channel(), code=code, actor=actor)
