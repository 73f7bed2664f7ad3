"""Log formatting: JSON lines for machines (python-json-logger), and a filter
that masks passwords in URLs (RABBITMQ_URL, DATABASE_URL) wherever they
appear: the message, its arguments, extra= fields and tracebacks. gunicorn's
access and error logs use the same formatter (gunicorn.conf.py)."""

import logging
import re

from pythonjsonlogger.json import JsonFormatter as LibraryJsonFormatter

URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)
# A guest's URL carries the registration's secret: logs show the ID only.
# Whatever stands in the secret's place is masked, however odd the ID before
# it; and anything shaped like a secret (32 random bytes, URL-safe: 43
# characters) is masked wherever it stands, e.g. in the ID's place.
GUEST_SECRET = re.compile(r"(/registrations/[^/\s\"]*/)[^/\s\"?]+")
SECRET_SHAPE = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{40,64}(?![A-Za-z0-9_-])")
# LogRecord attributes that hold no guest text (numbers, names of code).
PLAIN_TYPES = (int, float, bool, type(None))
# What an access log line carries as fields, from gunicorn's atoms.
ACCESS_FIELDS = {"h": "remote", "m": "method", "U": "path", "s": "status", "B": "bytes", "M": "duration_ms"}


def mask(text: str) -> str:
    return SECRET_SHAPE.sub("***", GUEST_SECRET.sub(r"\1***", URL_PASSWORD.sub(r"\1***@", text)))


def masked_value(value):
    """A record attribute as a log may show it: text masked; a request (Django
    attaches one to django.request and django.security records, and the JSON
    formatter would write its str()) reduced to its method and masked path;
    any other object to its masked text."""
    if isinstance(value, PLAIN_TYPES):
        return value
    if isinstance(value, str):
        return mask(value)
    if hasattr(value, "get_full_path") and hasattr(value, "method"):
        return mask(f"{value.method} {value.path}")
    return mask(str(value))


class MaskSecrets(logging.Filter):
    """Every attribute of the record, whatever its type, leaves masked:
    the message, its arguments, extra= fields. Tracebacks are masked by
    the formatters (JsonFormatter.formatException)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask(record.getMessage())
        record.args = None
        for key, value in list(vars(record).items()):
            if key not in ("msg", "args", "exc_info"):
                setattr(record, key, masked_value(value))
        return True


class JsonFormatter(LibraryJsonFormatter):
    """One object per line: time (UTC, ISO 8601 with its zone), level,
    logger, message, every extra= field, and the traceback (masked)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger", "exc_info": "exception"})
        kwargs.setdefault("timestamp", "time")
        super().__init__("%(levelname)s %(name)s %(message)s", **kwargs)

    def formatException(self, ei) -> str:  # noqa: N802 (logging's name)
        return mask(super().formatException(ei))


class AccessFields(logging.Filter):
    """gunicorn.access: its atoms (a dict in record.args) become fields of
    their own, before MaskSecrets formats the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args if isinstance(record.args, dict) else {}
        for atom, field in ACCESS_FIELDS.items():
            if atom in atoms:
                value = str(atoms[atom])
                setattr(record, field, int(value) if value.isdigit() and field != "remote" else value)
        return True
