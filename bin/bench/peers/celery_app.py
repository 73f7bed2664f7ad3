"""Celery 5.7 for the tasks section: RabbitMQ as its broker
(NIGHTJAR_BENCH_CELERY_BROKER, a queue of its own), acks_late, no result
backend; the task writes its row through Django (nightjar.settings' database)."""

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


@app.task(name="bench.write_row")
def write_row(n: int) -> None:
    write(n)
