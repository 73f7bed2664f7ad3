from django.apps import AppConfig


class MailConfig(AppConfig):
    name = "mail"
    verbose_name = "Nightjar mail"

    def ready(self) -> None:
        from mail import checks, outbox  # noqa: F401  (registers the checks; hears the tickets' facts)
