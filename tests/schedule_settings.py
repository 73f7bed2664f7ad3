"""The site's settings with a schedule every second: tests/test_tasks_schedules.py
runs two real schedulers with it."""

from nightjar.settings import *  # noqa: F403

NIGHTJAR_TASKS_SCHEDULE = {"every-second": {"task": "tests.task_functions.add", "every": 1, "args": [2, 3]}}
