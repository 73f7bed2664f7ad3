#!/usr/bin/env python3
"""Django's command-line utility for Nightjar."""

import os
import select
import sys


def reader_gone(stream) -> bool:
    """Whether the pipe behind a standard stream lost its reader (`| head`)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nightjar.settings")
    # A fresh terminal in the checkout talks to what bin/run started there
    # (lab mode, its broker, its database): see nightjar/localrun.py.
    from nightjar import localrun

    localrun.load()
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
        sys.stdout.flush()  # here, not at exit, so a reader gone is still caught below
    except BrokenPipeError:
        # Every command, one place: the reader of a pipe went away (`status | head -3`).
        # Exit quietly as `ls | head` does; a broken socket is still an error.
        if not (reader_gone(sys.stdout) or reader_gone(sys.stderr)):
            raise
        # Python flushes stdout again at exit; point it at /dev/null so that fails no more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(128 + 13)  # as if killed by SIGPIPE, what a shell reports for `ls | head`


if __name__ == "__main__":
    main()
