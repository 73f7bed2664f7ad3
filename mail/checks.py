"""The mail app's system checks: production must send guests' mail somewhere."""

from urllib.parse import urlsplit

from django.core import checks

from mail import conf

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@checks.register(checks.Tags.compatibility, deploy=True)
def mail_goes_somewhere(app_configs, **kwargs):
    problems = []
    if not conf.NIGHTJAR_SMTP_HOST:
        problems.append(
            checks.Error(
                f"NIGHTJAR_SMTP_HOST is not set: guests' mails (tickets, seats, cancellations) would be written "
                f"to files in {conf.NIGHTJAR_MAIL_DIR}, not sent.",
                hint="Set NIGHTJAR_SMTP_HOST (and NIGHTJAR_SMTP_PORT, _USER, _PASSWORD, _TLS or _SSL) to your mail server.",
                id="mail.E001",
            )
        )
    if urlsplit(conf.NIGHTJAR_SITE_URL).hostname in LOOPBACK:
        problems.append(
            checks.Error(
                f"NIGHTJAR_SITE_URL is {conf.NIGHTJAR_SITE_URL}: the links in guests' mails would lead to their own machine.",
                hint="Set NIGHTJAR_SITE_URL to the site's public address, such as https://nightjar.example.org.",
                id="mail.E002",
            )
        )
    return problems


@checks.register(checks.Tags.compatibility)
def lease_outlasts_an_attempt(app_configs, **kwargs):
    from mail.sender import ATTEMPT_WAITS, longest_attempt

    longest, lease = longest_attempt(), conf.NIGHTJAR_MAIL_LEASE_SECONDS
    if lease <= longest:
        return [
            checks.Warning(
                f"NIGHTJAR_MAIL_LEASE_SECONDS ({lease:g}) is not longer than one attempt "
                f"can take ({ATTEMPT_WAITS + 1} times NIGHTJAR_SMTP_TIMEOUT, {longest:g} s): a second sender "
                "could send a slow mail again while the first is still sending it.",
                hint=f"Set NIGHTJAR_MAIL_LEASE_SECONDS above {longest:g}.",
                id="mail.W003",
            )
        ]
    return []
