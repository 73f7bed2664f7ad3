from django.apps import AppConfig


class DoorConfig(AppConfig):
    name = "door"
    verbose_name = "Nightjar door"

    def ready(self) -> None:
        from door import signals  # noqa: F401  (remembers tickets that repair removes)
