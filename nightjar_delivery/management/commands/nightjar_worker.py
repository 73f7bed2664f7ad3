import argparse
import gc
import itertools
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nightjar_delivery import channel as channels
from nightjar_delivery import exits, metrics, sql, supervisor, transport
from nightjar_delivery.checkpoints import CHECKPOINTS, CRASHES, Pause
from nightjar_delivery.worker import Worker

logger = logging.getLogger("nightjar_delivery.worker")


def _default_handlers(argv: list[str]) -> str:
    """The default handler for --handler's help: the channel's that argv names
    with --channel (the help is built before the arguments are parsed, so it
    reads them itself), else each registered channel's (a project with several
    and no default has none yet)."""
    named = next(
        (
            value
            for flag, value in itertools.pairwise([*argv, ""])
            if flag == "--channel" or flag.startswith("--channel=")
            for value in [flag.partition("=")[2] or value]
        ),
        None,
    )
    chosen = [channel for channel in channels.all() if channel.name == named] or channels.all()
    return (
        "; ".join(f"{channel.name}: {channel.handler_help or channel.default_handler()}" for channel in chosen)
        or "none registered"
    )


class Command(BaseCommand):
    help = (
        "Take a channel's deliveries from the broker (RabbitMQ or Redis) and run its handler. By default takes one ready delivery and exits; "
        "--drain until the queue is empty; --serve until SIGTERM or Ctrl+C."
    )

    def run_from_argv(self, argv: list[str]) -> None:
        self.argv = list(argv)  # (for --handler's help, which names the chosen channel's default)
        return super().run_from_argv(argv)

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--drain", action="store_true", help="Repeat until nothing is ready, then print a count.")
        mode.add_argument("--serve", action="store_true", help="Consume until SIGTERM/SIGINT (service mode).")
        # The crash-window switches of a site that teaches them (a channel with teaches_checkpoints);
        # accepted everywhere (the tests kill workers at each checkpoint), shown only there.
        taught = any(channel.teaches_checkpoints for channel in channels.all())
        parser.add_argument(
            "--pause",
            choices=CHECKPOINTS,
            help="Stop at this checkpoint until Enter or Ctrl+C." if taught else argparse.SUPPRESS,
        )
        parser.add_argument(
            "--crash",
            choices=sorted(CRASHES),
            help="Exit abruptly: before (21) the write, after (22) the commit." if taught else argparse.SUPPRESS,
        )
        parser.add_argument(
            "--handler",
            help=(
                "Dotted path or .py file of the handler (default: the channel's own: "
                f"{_default_handlers(getattr(self, 'argv', []))})."
            ),
        )
        exits.add_channel_argument(parser)
        parser.add_argument(
            "--prefetch",
            type=int,
            default=10,
            help="Unacked deliveries the broker may send ahead in --serve (default 10).",
        )
        parser.add_argument(
            "--batch",
            type=int,
            metavar="N",
            help="Batch mode: up to N deliveries per transaction and one multiple=True ack (the channel's batch handler).",
        )
        parser.add_argument(
            "--batch-ms",
            type=float,
            default=50,
            metavar="MS",
            help="In batch mode, close a batch after this many milliseconds without a new delivery (default 50).",
        )
        parser.add_argument(
            "--reconcile-every",
            type=float,
            metavar="SECONDS",
            help=(
                "In --serve, republish the channel's intents whose publish was lost, this often (as reconcile does);"
                " default: the channel's own (the tasks': 5, for their retries), else none; 0: none."
            ),
        )
        parser.add_argument(
            "--limit", type=int, default=100, help="With --reconcile-every: per reconcile pass (default 100)."
        )
        parser.add_argument(
            "--health-file",
            metavar="PATH",
            help="In --serve, touch this file about once a second while the loop runs (a liveness probe for it).",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="In --serve, answer Prometheus scrapes of this worker's metrics on http://ADDRESS:PORT/metrics.",
        )
        parser.add_argument(
            "--metrics-address",
            default="127.0.0.1",
            metavar="ADDRESS",
            help="With --metrics-port: the address to listen on (default 127.0.0.1; 0.0.0.0 for a scraper elsewhere).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            metavar="N",
            help="With --serve: run N worker processes, each restarted if it dies, all stopped on SIGTERM.",
        )
        parser.add_argument(
            "--older-than",
            type=float,
            default=60,
            metavar="SECONDS",
            help="With --reconcile-every: the grace period (default 60).",
        )

    @staticmethod
    def prefetch(options: dict[str, Any]) -> int:
        # A batch can only fill up if RabbitMQ may send that many ahead.
        if options["batch"]:
            return max(options["batch"], options["prefetch"] if options["serve"] else 0)
        return options["prefetch"] if options["serve"] else 1

    def handle(self, *args: Any, **options: Any) -> None:
        if options["prefetch"] < 1:
            raise CommandError("--prefetch must be at least 1.", returncode=exits.USAGE)
        if options["batch"] is not None and not 1 <= options["batch"] <= 1000:
            raise CommandError("--batch must be between 1 and 1000.", returncode=exits.USAGE)
        if options["batch"] and options["handler"]:
            raise CommandError(
                "--handler picks the per-delivery handler; batch mode uses the channel's batch handler.",
                returncode=exits.USAGE,
            )
        if options["reconcile_every"] is not None and not options["serve"]:
            raise CommandError("--reconcile-every only makes sense with --serve.", returncode=exits.USAGE)
        if options["health_file"] and not options["serve"]:
            raise CommandError("--health-file only makes sense with --serve.", returncode=exits.USAGE)
        if options["metrics_port"] is not None and not options["serve"]:
            raise CommandError("--metrics-port only makes sense with --serve.", returncode=exits.USAGE)
        if options["metrics_port"] is not None and not 1 <= options["metrics_port"] <= 65535:
            raise CommandError("--metrics-port must be a port number (1-65535).", returncode=exits.USAGE)
        if options["metrics_port"] is not None and not metrics.AVAILABLE:
            raise CommandError(metrics.UNAVAILABLE, returncode=exits.USAGE)
        if options["limit"] < 1 or options["older_than"] < 0:
            raise CommandError("--limit must be at least 1 and --older-than not negative.", returncode=exits.USAGE)
        channel = exits.select_channel(options["channel"])
        if options["batch"] and channel.effects_outside_database:
            raise CommandError(
                f"The {channel.name} channel's handler has effects outside the database (effects_outside_database), "
                "so it runs one delivery at a time: a failed batch is retried delivery by delivery, which would "
                "repeat what its neighbours already did. Run it without --batch.",
                returncode=exits.USAGE,
            )
        try:
            # Loaded before any delivery is taken: a broken file leaves every delivery in RabbitMQ.
            handler = channel.load_handler(options["handler"] or channel.default_handler())
        except channels.HandlerError as error:
            raise CommandError(
                f"{error} Nothing was taken from {transport.name()}; fix it and run again.", returncode=exits.USAGE
            ) from None
        if transport.kind() == "redis_streams":
            # An XADD Redis may lose is an intent only reconcile would find: refuse to pretend.
            try:
                problems = transport.backend().durability_problems()
            except transport.BrokerError:
                problems = []  # unreachable: the worker reports it and reconnects
            if problems:
                raise CommandError(transport.backend().durability_refusal(problems), returncode=exits.USAGE)
        if options["processes"] is not None:
            if refused := supervisor.refusal(options):
                raise CommandError(refused, returncode=exits.USAGE)
            supervisor.supervise(
                argv=getattr(self, "argv", sys.argv), processes=options["processes"], stdout=self.stdout
            )
            return
        # A statement of a body still running when this process dies (killed, or ended past a
        # task's time limit) must not outlive it in PostgreSQL with its locks.
        sql.statements_end_with_this_process()
        pause = None
        if options["pause"] or options["crash"]:
            pause = Pause(at=options["pause"], crash=options["crash"], stdout=self.stdout)
        worker = Worker(
            handler=handler,
            pause=pause,
            stdout=self.stdout,
            prefetch=self.prefetch(options),
            reconcile_every=(
                options["reconcile_every"]
                if options["reconcile_every"] is not None or not options["serve"]
                else channel.serve_reconcile_every
            ),
            reconcile_options={"limit": options["limit"], "older_than": options["older_than"]},
            batch=options["batch"],
            batch_ms=options["batch_ms"],
            health_file=options["health_file"],
        )
        if options["metrics_port"] is not None:
            try:
                metrics.serve_worker_metrics(options["metrics_port"], options["metrics_address"])
            except OSError as error:
                raise CommandError(
                    f"Cannot serve metrics on {options['metrics_address']}:{options['metrics_port']}: {error}",
                    returncode=exits.USAGE,
                ) from None
            self.stdout.write(
                f"Metrics on http://{options['metrics_address']}:{options['metrics_port']}/metrics (Prometheus)."
            )
        # What start-up made (Django, the apps, the handler) lives as long as the worker: frozen,
        # the garbage collector's full passes no longer walk it (tens of ms each, issue 43).
        gc.freeze()
        try:
            if options["serve"]:
                worker.serve()
                return
            worker.install_interrupt_handler()
            worker.connect()
            if options["drain"]:
                count = worker.drain()
                deliveries = "delivery" if count == 1 else "deliveries"
                self.stdout.write(f"Drained {count} {deliveries}; no ready {channel.intents} left.")
            elif not worker.once():
                self.stdout.write(f"No ready {channel.intents}")
        except KeyboardInterrupt:
            # The connection closes: RabbitMQ hands back what was not acked.
            raise CommandError(worker.interrupted(), returncode=exits.INTERRUPTED) from None
        except transport.BrokerError as error:
            raise CommandError(str(error), returncode=exits.BROKER) from None
        except BrokenPipeError:
            raise  # the reader of the output went away: manage.py exits quietly
        except Exception as error:
            # Never ack on an error: closing the connection hands the delivery back.
            logger.exception("The handler failed")
            raise CommandError(
                f"Not acked, the delivery goes back to {transport.name()}: {error}", returncode=exits.REFUSED
            ) from None
        finally:
            worker.close()
