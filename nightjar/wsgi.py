"""WSGI entry point for gunicorn: `gunicorn nightjar.wsgi`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nightjar.settings")

application = get_wsgi_application()

from nightjar.keys import refuse_public_key  # noqa: E402 (needs the settings above)

refuse_public_key()

from nightjar.walcheckpoint import checkpoint_in_background  # noqa: E402

# SQLite: a thread of this process checkpoints the WAL, not a guest's request.
checkpoint_in_background()
