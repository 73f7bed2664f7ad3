"""System checks (ids nightjar_tasks.E001-E007). The backend's own problems
come from NightjarBackend.check(), which the Tasks framework runs."""

import re
from importlib.util import find_spec

from django.apps import apps
from django.core import checks

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@checks.register()
def tasks_framework_installed(app_configs=None, **kwargs):
    # Django 6.x has django.tasks (always checked); Django 5.2 needs the backport's app.
    if find_spec("django.tasks") is None and not apps.is_installed("django_tasks"):
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
    yield from time_limit_problems(backend, options.get("time_limit"))
    for name in sorted(backend.queues):
        if not _QUEUE_NAME.match(name):
            yield checks.Error(
                f"Task queue {name!r} of TASKS[{backend.alias!r}] cannot name a broker queue.",
                hint="Use letters, digits, '_' and '-' (at most 100).",
                id="nightjar_tasks.E005",
            )


def time_limit_problems(backend, limit):
    """A time limit is a number of seconds above 0 (None: the default). On
    SQLite an atomic task holds the only write lock for its whole run: a
    limit a guest's write cannot outwait (limits.sqlite_lock_budget) would
    answer guests 500 while a task runs, so it is refused here rather than
    cut silently (a task's own @retry(time_limit=) is cut to it)."""
    from nightjar_tasks import limits
    from nightjar_tasks.models import TaskRecord

    if limit is None:
        return
    if not isinstance(limit, int | float) or isinstance(limit, bool) or not limit > 0:
        yield checks.Error(
            f"TASKS[{backend.alias!r}]['OPTIONS']['time_limit'] must be a number of seconds above 0, not {limit!r}.",
            id="nightjar_tasks.E006",
        )
        return
    budget = limits.sqlite_lock_budget(TaskRecord.objects.db)
    if budget is not None and limit > budget:
        yield checks.Error(
            f"TASKS[{backend.alias!r}]['OPTIONS']['time_limit'] is {limit:g} s: on SQLite an atomic task holds "
            f"the only write lock that long, and a guest's write waits only {budget * 2:g} s (the busy timeout).",
            hint=(
                f"Keep it at most {budget:g} s; run longer tasks with @retry(atomic=False) (their writes commit "
                "on their own), or move to PostgreSQL (docs/tasks.md: A body runs inside the worker's transaction)."
            ),
            id="nightjar_tasks.E007",
        )
