"""The ticket domain's system checks (the engine's are in nightjar_delivery/checks.py)."""

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=True)
def lab_mode_off_in_production(app_configs, **kwargs):
    if settings.NIGHTJAR_LAB:
        return [
            checks.Warning(
                'NIGHTJAR_LAB is on: "Your registrations" lists every guest\'s registration, with its private link.',
                hint="Lab mode is for the learner lab on your own machine; unset NIGHTJAR_LAB in production.",
                id="nightjar.W001",
            )
        ]
    return []
