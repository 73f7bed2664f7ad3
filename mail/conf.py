"""The mail app's settings, with their defaults, read at call time
(`conf.NIGHTJAR_SMTP_HOST`), so a project's settings or a test's override wins.
The site reads them from the environment (nightjar/settings.py, README)."""

from pathlib import Path

from django.conf import settings

DEFAULTS = {
    # The mail server; empty: mails are written as .eml files to NIGHTJAR_MAIL_DIR (bin/run's default).
    "NIGHTJAR_SMTP_HOST": "",
    "NIGHTJAR_SMTP_PORT": 25,
    "NIGHTJAR_SMTP_USER": "",
    "NIGHTJAR_SMTP_PASSWORD": "",
    "NIGHTJAR_SMTP_TLS": False,  # STARTTLS after connecting
    "NIGHTJAR_SMTP_SSL": False,  # TLS from the first byte (port 465)
    # Every wait on the mail server (connect, each reply) ends after this many seconds.
    "NIGHTJAR_SMTP_TIMEOUT": 10.0,
    "NIGHTJAR_MAIL_FROM": "Nightjar Print Studio <tickets@nightjar.invalid>",
    "NIGHTJAR_MAIL_DIR": Path(".run/mail"),
    # The site as guests reach it: the links in their mails start with it.
    "NIGHTJAR_SITE_URL": "http://127.0.0.1:8000",
    # Attempts before a temporary refusal becomes a failure; the first retry
    # waits this many seconds, each next one twice as long (at most an hour).
    "NIGHTJAR_MAIL_ATTEMPTS": 8,
    "NIGHTJAR_MAIL_RETRY_SECONDS": 30.0,
    # A claimed mail comes back to every sender after this long if its sender
    # died before recording it: longer than one attempt can take.
    "NIGHTJAR_MAIL_LEASE_SECONDS": 120.0,
}


def __getattr__(name: str):
    if name not in DEFAULTS:
        raise AttributeError(f"mail.conf has no setting {name}")
    return getattr(settings, name, DEFAULTS[name])
