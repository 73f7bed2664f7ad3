"""System checks for the door's settings (`manage.py check`)."""

from django.core import checks

from door import conf


@checks.register()
def door_settings(app_configs, **kwargs):
    limit = conf.scans_per_minute()
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        return [
            checks.Error(
                f"NIGHTJAR_DOOR_SCANS_PER_MINUTE is {limit!r}; it must be a whole number of scans, 0 or more.",
                hint="0 turns the limit off; the default is 120 a minute per staff user.",
                id="door.E001",
            )
        ]
    return []
