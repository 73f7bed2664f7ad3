"""WSGI entry point for gunicorn: `gunicorn nightjar.wsgi`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nightjar.settings")

application = get_wsgi_application()

from nightjar.keys import refuse_public_key  # noqa: E402 (needs the settings above)

refuse_public_key()
