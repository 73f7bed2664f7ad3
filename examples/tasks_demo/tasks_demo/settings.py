"""Settings of the tasks demo: the smallest project that runs Django Tasks on
Nightjar. SQLite by default (DATABASE_URL for PostgreSQL), the broker from
NIGHTJAR_BROKER_URL (amqp:// for RabbitMQ, redis:// for Redis Streams).

TASKS_DEMO_BACKEND=db runs the same tasks on django-tasks-db instead (its
`db_worker`, no broker): the chaos soak compares the two under the same kills."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "django-insecure-tasks-demo-only"
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]

BACKEND = os.environ.get("TASKS_DEMO_BACKEND", "nightjar")
if BACKEND not in ("nightjar", "db"):
    raise ImproperlyConfigured(f"TASKS_DEMO_BACKEND must be nightjar or db, not {BACKEND!r}.")

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_tasks",  # the backport of django.tasks (Django 5.2); not needed on Django 6
    "nightjar_delivery",  # Nightjar's engine: transports, worker loop, reconcile, parking
    "nightjar_tasks",  # the Django Tasks backend on it
    "demo",
]
if BACKEND == "db":
    INSTALLED_APPS.append("django_tasks_db")

TASKS = {
    "default": {
        "BACKEND": "nightjar_tasks.backend.NightjarBackend",
        # A failing task is tried 3 times, 0.5 s then 1 s apart, then FAILED and parked.
        "OPTIONS": {"max_attempts": 3, "backoff": 0.5},
    }
    if BACKEND == "nightjar"
    else {"BACKEND": "django_tasks_db.DatabaseBackend"}
}

# The broker; its scheme picks the transport. `run` starts one of its own and
# says which (a fresh terminal here reads it from .run/local.env).
NIGHTJAR_BROKER_URL = os.environ.get("NIGHTJAR_BROKER_URL") or "amqp://guest:guest@127.0.0.1:5675/%2F"
NIGHTJAR_TASKS_QUEUE = os.environ.get("NIGHTJAR_TASKS_QUEUE") or "tasks_demo"
NIGHTJAR_CONSUMER_NAME = os.environ.get("NIGHTJAR_CONSUMER_NAME", "")
# RabbitMQ's management API, for the unacknowledged count in nightjar_tasks_status (`run` sets it for its node).
RABBITMQ_MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "")
# Killed workers' entries are claimed by the others after this long (Redis Streams).
NIGHTJAR_CLAIM_IDLE_SECONDS = float(os.environ.get("NIGHTJAR_CLAIM_IDLE_SECONDS") or 60)

DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "demo.sqlite3"}}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL: readers do not wait for the worker; IMMEDIATE: competing workers
    # queue for the write lock at BEGIN instead of failing halfway.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stdout": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
    "root": {"handlers": ["stdout"], "level": "WARNING"},
    "loggers": {
        "nightjar_delivery": {"level": "INFO"},
        "nightjar_tasks": {"level": "INFO"},
        "pika": {"level": "CRITICAL"},
    },
}
