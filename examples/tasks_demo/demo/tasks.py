"""The demo's tasks: plain functions with Django's @task, nothing of Nightjar."""

try:  # Django 6: the framework itself
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

import json
import time
import urllib.request

from demo.models import Visit


@task()
def record_visit(label: str, linger: float = 0.0) -> int:
    """Insert one Visit row; its writes commit with the task's result, once.
    linger: seconds to wait after the insert (the chaos soak's window for a
    kill between the write and the result)."""
    visit = Visit.objects.create(label=label)
    time.sleep(linger)
    return visit.pk


@task(takes_context=True)
def record_visit_and_call(context, label: str, url: str, linger: float = 0.0) -> int:
    """Call another service first (a POST to url, with the task's own id as
    its Idempotency-Key: the same on every attempt), then insert one Visit
    row. A worker killed after the call and before the commit makes the
    redelivery call again: a service that honours the key has one effect."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"label": label}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": f"task-{context.task_result.id}"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
    visit = Visit.objects.create(label=label)
    time.sleep(linger)
    return visit.pk


@task()
def divide(a: float, b: float) -> float:
    """Fails on demand: divide(1, 0) raises ZeroDivisionError, is retried,
    then ends FAILED with its traceback."""
    return a / b
