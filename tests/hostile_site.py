"""Settings for tests/test_hostile_traffic.py's gunicorn: Nightjar's own, with
one more guest URL whose view fails (tests/hostile_urls.py)."""

from nightjar.settings import *  # noqa: F403

ROOT_URLCONF = "tests.hostile_urls"
# Debug is off, yet the test run has no collectstatic manifest: plain names.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
