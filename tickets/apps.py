from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Nightjar tickets"

    def ready(self) -> None:
        from nightjar_delivery import METRICS_AVAILABLE, add_desk_collector, register
        from tickets import checks  # noqa: F401  (registers the system checks)
        from tickets.channel import RegistrationsChannel

        # The engine's one view of tickets (nightjar_delivery/channel.py).
        register(RegistrationsChannel())
        if METRICS_AVAILABLE:  # the [prometheus] extra
            from tickets.gauges import RegistrationCollector, SeatCollector

            add_desk_collector(RegistrationCollector())  # pending and parked registrations
            add_desk_collector(SeatCollector())  # the desk's /metrics: seats beside registrations
