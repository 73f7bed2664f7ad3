"""The settings nightjar_tasks reads, with their defaults, in one place
(read at call time, so a test's override wins). The broker itself is the
engine's (nightjar_delivery/conf.py: NIGHTJAR_BROKER_URL, NIGHTJAR_BROKER_TIMEOUT)."""

from django.conf import settings

from nightjar_tasks.compat import DEFAULT_TASK_QUEUE_NAME

BACKEND_PATH = "nightjar_tasks.backend.NightjarBackend"

DEFAULTS = {
    # The broker queue of Django's "default" task queue; queue "q" goes to "<this>.q".
    "NIGHTJAR_TASKS_QUEUE": "nightjar.tasks",
}

# A backend's OPTIONS, with their defaults (per task: nightjar_tasks.retry).
OPTIONS = {
    "max_attempts": 3,  # attempts before a task is FAILED and parked (its first run included)
    "backoff": 1.0,  # seconds before the 2nd attempt; doubles for each further one
    # Seconds one attempt may run (None: limits.DEFAULT_TIME_LIMIT, 300); on SQLite an atomic
    # task's is at most half the busy timeout (limits.sqlite_lock_budget; check nightjar_tasks.E007).
    "time_limit": None,
}


def __getattr__(name: str):
    if name not in DEFAULTS:
        raise AttributeError(f"nightjar_tasks.conf has no setting {name}")
    return getattr(settings, name, DEFAULTS[name])


def broker_queue(queue_name: str) -> str:
    """The broker queue a Django task queue travels on."""
    base = getattr(settings, "NIGHTJAR_TASKS_QUEUE", DEFAULTS["NIGHTJAR_TASKS_QUEUE"])
    return base if queue_name == DEFAULT_TASK_QUEUE_NAME else f"{base}.{queue_name}"


def channel_name(queue_name: str) -> str:
    """The engine's name for the channel of a Django task queue (`worker --channel NAME`)."""
    return "tasks" if queue_name == DEFAULT_TASK_QUEUE_NAME else f"tasks.{queue_name}"


def our_backends() -> dict[str, dict]:
    """alias -> params of every TASKS entry that uses this backend."""
    return {
        alias: params
        for alias, params in (getattr(settings, "TASKS", None) or {}).items()
        if params.get("BACKEND") == BACKEND_PATH
    }


def queue_names() -> list[str]:
    """Every Django task queue our backends accept, "default" first."""
    names = [DEFAULT_TASK_QUEUE_NAME]
    for params in our_backends().values():
        names += [name for name in params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME]) if name not in names]
    return names


def options(alias: str) -> dict:
    params = our_backends().get(alias, {})
    return {**OPTIONS, **params.get("OPTIONS", {})}
