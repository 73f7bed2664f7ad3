from django.apps import AppConfig


class DoorConfig(AppConfig):
    name = "door"
    verbose_name = "Nightjar door"

    def ready(self) -> None:
        from door import checks, signals  # noqa: F401  (registers the checks; remembers tickets that repair removes)
