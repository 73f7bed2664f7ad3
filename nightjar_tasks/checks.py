"""System checks (ids nightjar_tasks.E001-E005). The backend's own problems
come from NightjarBackend.check(), which the Tasks framework runs."""

import re

from django.apps import apps
from django.core import checks

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@checks.register()
def tasks_framework_installed(app_configs=None, **kwargs):
    try:
        import django.tasks  # noqa: F401 (Django 6.x: always checked)
    except ImportError:
        if not apps.is_installed("django_tasks"):
            yield checks.Error(
                "nightjar_tasks needs the Tasks framework's app, whose checks run the backend's.",
                hint='Add "django_tasks" to INSTALLED_APPS (the django-tasks backport).',
                id="nightjar_tasks.E001",
            )
    if not apps.is_installed("nightjar_delivery"):
        yield checks.Error(
            "nightjar_tasks runs on Nightjar's delivery engine.",
            hint='Add "nightjar_delivery" to INSTALLED_APPS.',
            id="nightjar_tasks.E002",
        )


def backend_problems(backend):
    options = {"max_attempts": 3, "backoff": 1.0, **backend.options}
    attempts, backoff = options["max_attempts"], options["backoff"]
    if type(attempts) is not int or attempts < 1:
        yield checks.Error(
            f"TASKS[{backend.alias!r}]['OPTIONS']['max_attempts'] must be a whole number of at least 1, not {attempts!r}.",
            id="nightjar_tasks.E003",
        )
    if not isinstance(backoff, int | float) or isinstance(backoff, bool) or backoff < 0:
        yield checks.Error(
            f"TASKS[{backend.alias!r}]['OPTIONS']['backoff'] must be a number of seconds (0 or more), not {backoff!r}.",
            id="nightjar_tasks.E004",
        )
    for name in sorted(backend.queues):
        if not _QUEUE_NAME.match(name):
            yield checks.Error(
                f"Task queue {name!r} of TASKS[{backend.alias!r}] cannot name a broker queue.",
                hint="Use letters, digits, '_' and '-' (at most 100).",
                id="nightjar_tasks.E005",
            )
