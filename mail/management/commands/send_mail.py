from django.core.management.base import BaseCommand, CommandError

from mail import conf, metrics
from mail.loop import SenderLoop
from nightjar_delivery import exits

USAGE = exits.USAGE  # a wrong command line, as the engine's commands


class Command(BaseCommand):
    help = (
        "Send the guests' mails from the outbox (at least once, each with its own Message-ID). By default sends "
        "what is due now and exits; --serve runs until SIGTERM or Ctrl+C. Without NIGHTJAR_SMTP_HOST the mails "
        "are written as .eml files to NIGHTJAR_MAIL_DIR."
    )

    def add_arguments(self, parser):
        parser.add_argument("--serve", action="store_true", help="Send until SIGTERM/SIGINT (service mode).")
        parser.add_argument(
            "--poll", type=float, default=1.0, metavar="SECONDS", help="With --serve: look for due mail this often."
        )
        parser.add_argument(
            "--health-file",
            metavar="PATH",
            help="With --serve: touch this file on every pass (a probe checks its age).",
        )
        parser.add_argument("--metrics-port", type=int, help="With --serve: serve the sender's metrics on this port.")
        parser.add_argument("--metrics-address", default="127.0.0.1", help="With --metrics-port: the address.")

    def handle(self, *args, **options):
        if (options["health_file"] or options["metrics_port"]) and not options["serve"]:
            raise CommandError("--health-file and --metrics-port only make sense with --serve.", returncode=USAGE)
        if options["poll"] <= 0:
            raise CommandError("--poll must be a positive number of seconds.", returncode=USAGE)
        loop = SenderLoop(say=self.stdout.write, health_file=options["health_file"], poll=options["poll"])
        where = (
            f"the mail server {conf.NIGHTJAR_SMTP_HOST}:{conf.NIGHTJAR_SMTP_PORT}"
            if conf.NIGHTJAR_SMTP_HOST
            else f"files in {conf.NIGHTJAR_MAIL_DIR}"
        )
        if options["serve"]:
            if options["metrics_port"]:
                try:
                    metrics.serve(options["metrics_port"], options["metrics_address"])
                except (OSError, RuntimeError) as error:
                    raise CommandError(f"Cannot serve metrics: {error}", returncode=USAGE) from None
                self.stdout.write(f"Metrics on http://{options['metrics_address']}:{options['metrics_port']}/metrics")
            loop.serve()  # says nothing until a mail goes (bin/run's last lines stay its own)
            self.stdout.write(f"Stopped; {loop.sent} sent.")
            return
        sent = loop.drain()
        self.stdout.write(f"{sent} sent to {where}.")
