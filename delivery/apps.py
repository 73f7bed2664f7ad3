from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    verbose_name = "Nightjar delivery engine"

    def ready(self) -> None:
        from delivery import checks  # noqa: F401  (registers the system checks)
