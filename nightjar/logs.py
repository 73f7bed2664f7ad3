"""Log formatting: JSON lines for machines (python-json-logger), and a filter
that masks passwords in URLs (RABBITMQ_URL, DATABASE_URL) wherever they
appear: the message, its arguments, extra= fields and tracebacks. gunicorn's
access and error logs use the same formatter (gunicorn.conf.py)."""

import logging
import re

from pythonjsonlogger.json import JsonFormatter as LibraryJsonFormatter

URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)
# A guest's URL carries the registration's secret: logs show the ID only.
GUEST_SECRET = re.compile(r"(/registrations/R-\d+/)[^/\s\"?]+")
# What an access log line carries as fields, from gunicorn's atoms.
ACCESS_FIELDS = {"h": "remote", "m": "method", "U": "path", "s": "status", "B": "bytes", "M": "duration_ms"}


def mask(text: str) -> str:
    return GUEST_SECRET.sub(r"\1***", URL_PASSWORD.sub(r"\1***@", text))


class MaskSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask(record.getMessage())
        record.args = None
        for key, value in vars(record).items():
            if isinstance(value, str) and key != "msg" and ("://" in value or "/registrations/" in value):
                setattr(record, key, mask(value))
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
