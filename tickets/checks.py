"""System checks for Nightjar's own settings (`manage.py check [--deploy]`)."""

from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks


@checks.register()
def broker_settings(app_configs, **kwargs):
    errors = []
    url = urlsplit(settings.RABBITMQ_URL)
    if url.scheme not in ("amqp", "amqps") or not url.hostname:
        errors.append(
            checks.Error(
                "RABBITMQ_URL is not an AMQP URL.",
                hint="Use amqp://user:password@host:5672/vhost (amqps:// for TLS).",
                id="nightjar.E001",
            )
        )
    if not settings.NIGHTJAR_QUEUE.strip():
        errors.append(
            checks.Error("NIGHTJAR_QUEUE is empty.", hint="Leave it unset for the default.", id="nightjar.E002")
        )
    return errors


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
