from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "tickets"
    verbose_name = "Nightjar tickets"

    def ready(self) -> None:
        from tickets import checks  # noqa: F401  (registers the system checks)
