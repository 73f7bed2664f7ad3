"""The demo's tasks: plain functions with Django's @task, nothing of Nightjar."""

try:  # Django 6: the framework itself
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from demo.models import Visit


@task()
def record_visit(label: str) -> int:
    """Insert one Visit row; its writes commit with the task's result, once."""
    return Visit.objects.create(label=label).pk


@task()
def divide(a: float, b: float) -> float:
    """Fails on demand: divide(1, 0) raises ZeroDivisionError, is retried,
    then ends FAILED with its traceback."""
    return a / b
