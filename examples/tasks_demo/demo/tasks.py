"""The demo's tasks: plain functions with Django's @task, nothing of Nightjar."""

try:  # Django 6: the framework itself
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

import time

from demo.models import Visit


@task()
def record_visit(label: str, linger: float = 0.0) -> int:
    """Insert one Visit row; its writes commit with the task's result, once.
    linger: seconds to wait after the insert (the chaos soak's window for a
    kill between the write and the result)."""
    visit = Visit.objects.create(label=label)
    time.sleep(linger)
    return visit.pk


@task()
def divide(a: float, b: float) -> float:
    """Fails on demand: divide(1, 0) raises ZeroDivisionError, is retried,
    then ends FAILED with its traceback."""
    return a / b
