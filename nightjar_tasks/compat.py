"""The one place that imports the Tasks framework: Django 6.x's `django.tasks`
when present, else the `django-tasks` backport (0.12, for Django 5.2)."""

try:  # Django 6.x
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.tasks.utils import get_exception_traceback, get_module_path, normalize_json
except ImportError:  # the backport
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import get_exception_traceback, get_module_path, normalize_json

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "get_exception_traceback",
    "get_module_path",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
