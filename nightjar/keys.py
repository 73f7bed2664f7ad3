"""No production run on a public key. Sessions are signed cookies and CSRF
tokens are signed too: whoever knows SECRET_KEY can forge either, so a key
written in this repository (settings' local fallback, docker-compose's old
default, the Dockerfile's build-time one) must never sign a real site."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Every key this project has ever written down. Refused outside debug.
PUBLIC_KEYS = frozenset(
    {
        "django-insecure-local-only-never-deploy-this-key",
        "change-me-compose-only-not-for-production-use",
        "collectstatic-only",
        "change-me",
    }
)
MIN_KEY_LENGTH = 50  # Django's own bar (security.W009)


def public_key_problem(key: str) -> str | None:
    """Why this key is no secret, or None when it could be one."""
    if not key:
        return "DJANGO_SECRET_KEY is not set"
    if key in PUBLIC_KEYS or key.startswith("django-insecure-"):
        return "DJANGO_SECRET_KEY is one of the keys written in Nightjar's own files"
    if len(key) < MIN_KEY_LENGTH or len(set(key)) < 5:
        return f"DJANGO_SECRET_KEY is shorter than {MIN_KEY_LENGTH} characters or barely varied"
    return None


def refuse_public_key() -> None:
    """Called where the site starts serving (nightjar/wsgi.py): with debug off,
    a missing, short or public key is an ImproperlyConfigured, not a warning."""
    if settings.DEBUG:
        return
    problem = public_key_problem(settings.NIGHTJAR_SECRET_KEY_GIVEN)
    if problem:
        raise ImproperlyConfigured(
            f"{problem}: with DJANGO_DEBUG off the site will not start on a key anyone can read, since it signs "
            "the session cookies. Set DJANGO_SECRET_KEY to a long random value, e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
        )
