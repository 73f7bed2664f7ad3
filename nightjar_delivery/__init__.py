"""Nightjar's delivery engine: a broker's deliveries to a handler, acked only
after the handler's commit; reconcile; parking. This module is what a user
of the engine may import (everything else may change):

    from nightjar_delivery import Channel, register, publish_on_commit, BrokerError

The user apps of this repository (tickets, nightjar_tasks, desk, door,
classroom, the site) import the engine only through these names; a test
(tests/test_import_contract.py) refuses `nightjar_delivery.<module>` in
them. Each name is here because a user needs it:

- Channel, register, get_channel, DomainError, HandlerError: what a user
  subclasses, registers in ready(), looks up by name, and raises.
- publish_on_commit (with publish_transaction around a write that may be
  outside a transaction; publish_after_commit is what it runs after the
  commit), requeue_parked, discard_parked, reconcile_channel,
  collect_dead_letters, ReconcileReport, CollectReport, RECONCILE_ACTOR: the
  one publish path and the staff's parking and reconcile, for a user's own
  commands and admin.
- AbstractRejectedMessage, AbstractDeliveryFailure, AbstractRedelivery,
  AbstractParkedDelivery, AbstractWorkerReport: the record models a user
  subclasses (as AbstractUser); record_rejection for a batch handler; park,
  the one way to park an intent (the tasks park a task out of attempts).
- Plan, plan_then_apply, staff_reason, ReadOnlyRecordAdmin: the admin's
  plan-then-confirm page, and the read-only admin of the records.
- actor: who a staff change is recorded as, spelt one way in every trail.
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
from typing import TYPE_CHECKING

# name -> "module" (the name itself in it), "module:attribute", or "module:" (the module itself)
_PUBLIC = {
    "Channel": "channel",
    "DomainError": "channel",
    "HandlerError": "channel",
    "register": "channel",
    "get_channel": "channel:get",
    "publish_after_commit": "reconcile",
    "publish_on_commit": "reconcile",
    "publish_transaction": "reconcile",
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
    "ReadOnlyRecordAdmin": "admin",
    "actor": "actors",
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


# What each name is, for type checkers (tests/test_import_contract.py holds this to _PUBLIC): the
# `X as X` imports and the assignments re-export them; at run time __getattr__ loads a name when first used.
if TYPE_CHECKING:
    from nightjar_delivery import admin_plans, channel, metrics, reconcile
    from nightjar_delivery import exits as exits
    from nightjar_delivery import sql as sql
    from nightjar_delivery import transport as transport
    from nightjar_delivery.actors import actor as actor
    from nightjar_delivery.admin import ReadOnlyRecordAdmin as ReadOnlyRecordAdmin
    from nightjar_delivery.admin_plans import Plan as Plan
    from nightjar_delivery.admin_plans import plan_then_apply as plan_then_apply
    from nightjar_delivery.channel import Channel as Channel
    from nightjar_delivery.channel import DomainError as DomainError
    from nightjar_delivery.channel import HandlerError as HandlerError
    from nightjar_delivery.channel import register as register
    from nightjar_delivery.checkpoints import CHECKPOINTS as CHECKPOINTS
    from nightjar_delivery.checkpoints import CRASHES as CRASHES
    from nightjar_delivery.checkpoints import Pause as Pause
    from nightjar_delivery.checkpoints import checkpoint as checkpoint
    from nightjar_delivery.codec import ContractError as ContractError
    from nightjar_delivery.codec import check_size as check_size
    from nightjar_delivery.codec import load_json as load_json
    from nightjar_delivery.codec import storable_text as storable_text
    from nightjar_delivery.health import dependency_health as dependency_health
    from nightjar_delivery.health import describe_replicas as describe_replicas
    from nightjar_delivery.health import queue_status as queue_status
    from nightjar_delivery.metrics import Counter as Counter
    from nightjar_delivery.metrics import Histogram as Histogram
    from nightjar_delivery.metrics import add_desk_collector as add_desk_collector
    from nightjar_delivery.reconcile import RECONCILE_ACTOR as RECONCILE_ACTOR
    from nightjar_delivery.reconcile import CollectReport as CollectReport
    from nightjar_delivery.reconcile import ReconcileReport as ReconcileReport
    from nightjar_delivery.reconcile import collect_dead_letters as collect_dead_letters
    from nightjar_delivery.reconcile import discard_parked as discard_parked
    from nightjar_delivery.reconcile import publish_after_commit as publish_after_commit
    from nightjar_delivery.reconcile import publish_on_commit as publish_on_commit
    from nightjar_delivery.reconcile import publish_transaction as publish_transaction
    from nightjar_delivery.reconcile import requeue_parked as requeue_parked
    from nightjar_delivery.recording import park as park
    from nightjar_delivery.recording import record_rejection as record_rejection
    from nightjar_delivery.records import AbstractDeliveryFailure as AbstractDeliveryFailure
    from nightjar_delivery.records import AbstractParkedDelivery as AbstractParkedDelivery
    from nightjar_delivery.records import AbstractRedelivery as AbstractRedelivery
    from nightjar_delivery.records import AbstractRejectedMessage as AbstractRejectedMessage
    from nightjar_delivery.records import AbstractWorkerReport as AbstractWorkerReport
    from nightjar_delivery.transport import BrokerError as BrokerError
    from nightjar_delivery.transport import Delivery as Delivery
    from nightjar_delivery.transport import publish as publish
    from nightjar_delivery.views import metrics as metrics_view  # noqa: F401 (re-exported, renamed)
    from nightjar_delivery.worker import interrupted_by_signal as interrupted_by_signal

    get_channel = channel.get
    reconcile_channel = reconcile.reconcile
    staff_reason = admin_plans.reason
    METRICS_AVAILABLE = metrics.AVAILABLE
