"""django-tasks-db 0.13 as the TASKS backend, on the benchmark's database
and Nightjar's own database options (SQLite in WAL with a 20 s busy
timeout), so the two backends differ only in the backend. nightjar_tasks
stays installed (the desk imports its summary) but is no TASKS backend here:
django-tasks-db's is the only one."""

from nightjar.settings import *  # noqa: F403
from nightjar.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS]
INSTALLED_APPS += [app for app in ("django_tasks", "django_tasks_db") if app not in INSTALLED_APPS]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
