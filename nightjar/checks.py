"""The site's system checks (ids nightjar.E0xx): what `manage.py check
--deploy` must catch before a deploy, not only the web server at start-up."""

from django.conf import settings
from django.core import checks

from nightjar import keys


@checks.register(checks.Tags.security, deploy=True)
def secret_key_given(app_configs=None, **kwargs):
    """With debug off, the site refuses to serve on a missing, short or public
    key (nightjar/wsgi.py): `check --deploy` says so too, so a deploy gate
    stops it before the web server does. (A deploy check: the worker and the
    other commands sign nothing and run without a key.)"""
    if settings.DEBUG:
        return []
    problem = keys.public_key_problem(settings.NIGHTJAR_SECRET_KEY_GIVEN)
    if not problem:
        return []
    return [
        checks.Error(
            f"{problem}, and DJANGO_DEBUG is off: the site will not start.",
            hint="Set DJANGO_SECRET_KEY to 50 or more random characters, the same on every web machine.",
            id="nightjar.E010",
        )
    ]
