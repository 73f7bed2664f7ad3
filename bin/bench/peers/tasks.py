"""The benchmark's trivial task: write one row (n, the time it was written),
through Django's connection, so it is inside whatever transaction the
backend runs the body in."""

import time

from django.db import connection

try:  # Django 6.x
    from django.tasks import task
except ImportError:  # the backport, on Django 5.2
    from django_tasks import task

from bench.peers import ROW_TABLE


def write(n: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {ROW_TABLE} (n, written) VALUES (%s, %s)", [n, time.time()])


@task
def write_row(n: int) -> None:
    write(n)
