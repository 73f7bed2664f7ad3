from django.apps import AppConfig


class NightjarTasksConfig(AppConfig):
    name = "nightjar_tasks"
    label = "nightjar_tasks"
    verbose_name = "Nightjar tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from nightjar_tasks import channel, checks, schedules  # noqa: F401 (checks, schedules register their checks)

        channel.register_channels()
        from nightjar_delivery import METRICS_AVAILABLE, add_desk_collector

        if METRICS_AVAILABLE:  # the [prometheus] extra
            from nightjar_tasks.metrics import TaskPathCollector

            add_desk_collector(TaskPathCollector())  # the desk's /metrics, per task path
