"""Nightjar's delivery engine: a broker's deliveries to a handler, acked only
after the handler's commit; reconcile; parking. This module is what a user
of the engine may import (everything else may change):

    from nightjar_delivery import Channel, register, publish_after_commit, BrokerError

The user apps of this repository (tickets, nightjar_tasks, desk, door,
classroom, the site) import the engine only through these names; a test
(tests/test_import_contract.py) refuses `nightjar_delivery.<module>` in
them. Each name is here because a user needs it:

- Channel, register, get_channel, DomainError, HandlerError: what a user
  subclasses, registers in ready(), looks up by name, and raises.
- publish_after_commit, requeue_parked, discard_parked, reconcile_channel,
  collect_dead_letters, ReconcileReport, CollectReport, RECONCILE_ACTOR: the
  one publish path and the staff's parking and reconcile, for a user's own
  commands and admin.
- AbstractRejectedMessage, AbstractDeliveryFailure, AbstractRedelivery,
  AbstractParkedDelivery, AbstractWorkerReport: the record models a user
  subclasses (as AbstractUser); record_rejection for a batch handler; park,
  the one way to park an intent (the tasks park a task out of attempts).
- Plan, plan_then_apply, staff_reason: the admin's plan-then-confirm page.
- ContractError, load_json, storable_text, check_size: the codec a user's
  contract builds on.
- checkpoint, Pause, CHECKPOINTS, CRASHES: the handler's pause points (the lab).
- interrupted_by_signal: whether the worker was asked to stop (a long task
  gives up its slot).
- Counter, Histogram, add_desk_collector, METRICS_AVAILABLE, metrics_view:
  a user's own metrics next to the engine's, and the /metrics view.
- describe_replicas, dependency_health, queue_status: the health a user's
  status page shows.
- Delivery, BrokerError, publish; and three namespaces whose every name is
  public: `transport` (the broker seam: name(), queue_counts(), purge),
  `sql` (the portable SQL helpers the tasks' rows are written with) and
  `exits` (the exit codes and error mapping every command shares).

Names are loaded when first used, so importing this module at start-up
touches no model and no broker client."""

import importlib

# name -> "module" (the name itself in it), "module:attribute", or "module:" (the module itself)
_PUBLIC = {
    "Channel": "channel",
    "DomainError": "channel",
    "HandlerError": "channel",
    "register": "channel",
    "get_channel": "channel:get",
    "publish_after_commit": "reconcile",
    "requeue_parked": "reconcile",
    "discard_parked": "reconcile",
    "reconcile_channel": "reconcile:reconcile",
    "collect_dead_letters": "reconcile",
    "ReconcileReport": "reconcile",
    "CollectReport": "reconcile",
    "RECONCILE_ACTOR": "reconcile",
    "AbstractRejectedMessage": "records",
    "AbstractDeliveryFailure": "records",
    "AbstractRedelivery": "records",
    "AbstractParkedDelivery": "records",
    "AbstractWorkerReport": "records",
    "record_rejection": "recording",
    "park": "recording",
    "Plan": "admin_plans",
    "plan_then_apply": "admin_plans",
    "staff_reason": "admin_plans:reason",
    "ContractError": "codec",
    "load_json": "codec",
    "storable_text": "codec",
    "check_size": "codec",
    "checkpoint": "checkpoints",
    "Pause": "checkpoints",
    "CHECKPOINTS": "checkpoints",
    "CRASHES": "checkpoints",
    "interrupted_by_signal": "worker",
    "Counter": "metrics",
    "Histogram": "metrics",
    "add_desk_collector": "metrics",
    "METRICS_AVAILABLE": "metrics:AVAILABLE",
    "metrics_view": "views:metrics",
    "describe_replicas": "health",
    "dependency_health": "health",
    "queue_status": "health",
    "BrokerError": "transport",
    "Delivery": "transport",
    "publish": "transport",
    "transport": "transport:",
    "sql": "sql:",
    "exits": "exits:",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'nightjar_delivery' has no attribute {name!r}")
    module, _, attribute = _PUBLIC[name].partition(":")
    loaded = importlib.import_module(f"nightjar_delivery.{module}")
    if _ and not attribute:
        return loaded
    return getattr(loaded, attribute or name)
