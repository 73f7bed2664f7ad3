"""One mapping from what went wrong to a command's exit status, for every
command of the project (the guides print them): 1 the domain refused, a
check failed or the handler did; 2 wrong use (options, lab mode off, a
handler that cannot be loaded); 3 the broker did not answer; 130 Ctrl+C at
a checkpoint."""

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.base import CommandError

from nightjar_delivery import channel
from nightjar_delivery.channel import DomainError, HandlerError
from nightjar_delivery.transport import BrokerError

REFUSED = 1
USAGE = 2
BROKER = 3
INTERRUPTED = 130


class UsageError(Exception):
    """The command cannot run as asked (lab mode is off, say): exit 2."""


def add_channel_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--channel",
        metavar="NAME",
        help="The delivery channel (default: the project's default channel when registered, else the only one registered).",
    )


def select_channel(name: str | None) -> channel.Channel:
    """The command's channel (`--channel NAME`, else the default), made the
    process's current() one; an unknown or ambiguous name exits 2."""
    try:
        channel.select(name)
        return channel.current()
    except LookupError as error:
        raise CommandError(str(error), returncode=USAGE) from None


@contextmanager
def exit_codes(*, broker: str = "Stopped: ") -> Iterator[None]:
    """Inside, a refusal, a usage error or a broker error becomes the
    CommandError of its exit status; broker prefixes the broker's sentence."""
    try:
        yield
    except DomainError as error:
        raise CommandError(str(error), returncode=REFUSED) from None
    except (UsageError, HandlerError) as error:
        raise CommandError(str(error), returncode=USAGE) from None
    except BrokerError as error:
        raise CommandError(f"{broker}{error}", returncode=BROKER) from None
