from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Nightjar tickets"

    def ready(self) -> None:
        from nightjar_delivery import channel
        from tickets import checks  # noqa: F401  (registers the system checks)
        from tickets.channel import RegistrationsChannel

        # The engine's one view of tickets (nightjar_delivery/channel.py).
        channel.register(RegistrationsChannel())
