from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Nightjar tickets"

    def ready(self) -> None:
        from nightjar_delivery import channel
        from nightjar_delivery import metrics as engine_metrics
        from tickets import checks  # noqa: F401  (registers the system checks)
        from tickets.channel import RegistrationsChannel

        # The engine's one view of tickets (nightjar_delivery/channel.py).
        channel.register(RegistrationsChannel())
        if engine_metrics.AVAILABLE:  # the [prometheus] extra
            from tickets.gauges import RegistrationCollector, SeatCollector

            engine_metrics.add_desk_collector(RegistrationCollector())  # pending and parked registrations
            engine_metrics.add_desk_collector(SeatCollector())  # the desk's /metrics: seats beside registrations
