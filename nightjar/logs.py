"""Log formatting: JSON lines for machines, and a filter that masks passwords
in URLs (RABBITMQ_URL, DATABASE_URL) wherever they appear in a message."""

import json
import logging
import re

URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)


def mask(text: str) -> str:
    return URL_PASSWORD.sub(r"\1***@", text)


class MaskSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
