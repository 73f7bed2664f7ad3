"""Reconcile and parking for registrations: the engine's passes
(nightjar_delivery/reconcile.py) on the registrations channel. Pending registrations
older than a grace period are published again, oldest first, after the
broker's dead letters are collected (parked for staff, published again once,
or rejected); staff requeue or discard what is parked."""

import nightjar_delivery as engine
from nightjar_delivery import RECONCILE_ACTOR, Channel, CollectReport, ReconcileReport, get_channel
from tickets.models import Registration

__all__ = ["CollectReport", "ReconcileReport", "RECONCILE_ACTOR"]


def registrations_channel() -> Channel:
    return get_channel("registrations")


def reconcile_registrations(**options) -> ReconcileReport:
    """nightjar_delivery.reconcile_channel (limit, older_than, catch_up, max_seconds, actor)."""
    return engine.reconcile_channel(registrations_channel(), **options)


def collect_dead_letters(**options) -> CollectReport:
    return engine.collect_dead_letters(registrations_channel(), **options)


def requeue_parked(registration: Registration, *, actor: str) -> Registration:
    """Staff: publish a parked registration again; raises NightjarError."""
    return engine.requeue_parked(registrations_channel(), registration, actor=actor)


def discard_parked(registration: Registration, *, actor: str) -> Registration:
    """Staff: give up on a parked registration; raises NightjarError."""
    return engine.discard_parked(registrations_channel(), registration, actor=actor)
