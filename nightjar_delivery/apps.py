from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "nightjar_delivery"
    verbose_name = "Nightjar delivery engine"

    def ready(self) -> None:
        from nightjar_delivery import checks  # noqa: F401  (registers the system checks)
