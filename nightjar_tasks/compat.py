"""The one place that imports the Tasks framework: Django 6.x's `django.tasks`
when present, else the `django-tasks` backport (0.12, for Django 5.2).

The two differ in a few names: Django 6 calls the invalid-task error
`InvalidTask` (the backport `InvalidTaskError`) and has no `utils` module
(its `normalize_json` lives in `django.utils.json`; the two helpers the
backport's `utils` has are one line each, written here)."""

from importlib.util import find_spec
from traceback import format_exception

# mypy reads the backport's branch (always_true in pyproject.toml): django-stubs 5.2,
# like Django 5.2, has no django.tasks.
BACKPORT = find_spec("django.tasks") is None

if BACKPORT:
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import log_task_finished, log_task_started, task_enqueued, task_finished, task_started
    from django_tasks.signals import logger as tasks_logger
    from django_tasks.utils import normalize_json
else:  # Django 6.x
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import log_task_finished, log_task_started, task_enqueued, task_finished, task_started
    from django.tasks.signals import logger as tasks_logger
    from django.utils.json import normalize_json


def get_module_path(value) -> str:
    """The dotted path TaskError stores for an exception class (as both frameworks write it)."""
    return f"{value.__module__}.{value.__qualname__}"


def get_exception_traceback(error: BaseException) -> str:
    return "".join(format_exception(error))


__all__ = [
    "BACKPORT",
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "get_exception_traceback",
    "get_module_path",
    "log_task_finished",
    "log_task_started",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "tasks_logger",
]
