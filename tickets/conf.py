"""The tickets app's own settings, with their defaults, read at call time
(`conf.NIGHTJAR_QUEUE`) as the engine reads its own (nightjar_delivery/conf.py),
so a project's settings module or a test's override wins."""

from django.conf import settings

DEFAULTS = {
    # The registrations channel's broker queue (its dead letters: <queue>.dead).
    "NIGHTJAR_QUEUE": "nightjar.registrations",
}


def __getattr__(name: str):
    if name not in DEFAULTS:
        raise AttributeError(f"tickets.conf has no setting {name}")
    return getattr(settings, name, DEFAULTS[name])
