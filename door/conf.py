"""The door's settings, with their defaults: the app reads them here, so a
project that installs it need not set any."""

from django.conf import settings


def scans_per_minute() -> int:
    """Scans one staff user may send a minute (0: no limit). A phone at a busy
    door scans about one guest every few seconds; a scanner in a loop is cut off."""
    return getattr(settings, "NIGHTJAR_DOOR_SCANS_PER_MINUTE", 120)
