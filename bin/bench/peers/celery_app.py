"""Celery 5.7 for the tasks section: RabbitMQ as its broker
(NIGHTJAR_BENCH_CELERY_BROKER, a queue of its own), acks_late, no result
backend; the task writes its row through Django (nightjar.settings' database).

Configured as a Celery user on PostgreSQL would: Celery's Django fix-up closes
every database connection before and after each task, whatever CONN_MAX_AGE
says (celery#4116; its CONN_MAX_AGE support was reverted in 5.5), so each task
paid a new PostgreSQL connection (~1,000 tasks/s on SQLite, ~220 on
PostgreSQL). CELERY_DB_REUSE_MAX is the fix-up's own switch for that: it keeps
a connection for that many tasks."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nightjar.settings")
django.setup()

from celery import Celery  # noqa: E402

from bench.peers.tasks import write  # noqa: E402

app = Celery("bench", broker=os.environ.get("NIGHTJAR_BENCH_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_default_queue=os.environ.get("NIGHTJAR_BENCH_CELERY_QUEUE", "bench.celery"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
# Read by the Django fix-up under its old-style name only (celery/fixups/django.py).
app.conf.CELERY_DB_REUSE_MAX = 1000


@app.task(name="bench.write_row")
def write_row(n: int) -> None:
    write(n)
