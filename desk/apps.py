from django.apps import AppConfig


class DeskConfig(AppConfig):
    """The operations desk: the dashboard, its charts, reconcile-now and
    audit-now (desk/views.py on desk/sites.py's admin site), and /metrics."""

    name = "desk"
    verbose_name = "Operations desk"
