"""Nightjar's delivery engine: a broker's deliveries to a handler, acked only
after the handler's commit; reconcile; parking. This module is what a user
of the engine may import (everything else may change):

    from nightjar_delivery import Channel, register, publish_after_commit, BrokerError

Names are loaded when first used, so importing this module at start-up
touches no model and no broker client."""

import importlib

# name -> the module that defines it
_PUBLIC = {
    "Channel": "channel",
    "DomainError": "channel",
    "HandlerError": "channel",
    "register": "channel",
    "publish_after_commit": "reconcile",
    "requeue_parked": "reconcile",
    "discard_parked": "reconcile",
    "BrokerError": "transport",
    "Delivery": "transport",
    "publish": "transport",
    "ContractError": "codec",
    "load_json": "codec",
    "storable_text": "codec",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'nightjar_delivery' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nightjar_delivery.{_PUBLIC[name]}"), name)
