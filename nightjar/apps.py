from django.apps import AppConfig


class NightjarConfig(AppConfig):
    """The project as an app of its own: the tables its middleware keeps (the
    shared rate limit's counts, the staff sessions that sign-out ends) and
    its system checks."""

    name = "nightjar"
    verbose_name = "Nightjar site"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from nightjar import checks, staffsessions  # noqa: F401 (they register their checks and signals)
