from django.apps import AppConfig


class MailConfig(AppConfig):
    name = "mail"
    verbose_name = "Nightjar mail"

    def ready(self) -> None:
        from mail import checks, outbox  # noqa: F401  (registers the checks; hears the tickets' facts)
        from nightjar_delivery import METRICS_AVAILABLE, add_desk_collector

        if METRICS_AVAILABLE:
            from mail.gauges import OutboxCollector

            add_desk_collector(OutboxCollector())  # the desk's /metrics: the outbox per state and kind
