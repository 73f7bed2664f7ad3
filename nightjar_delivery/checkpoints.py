"""Checkpoints: the named points in a handler where a learner can pause the
worker (--pause NAME) and a script can crash it (--crash before|after).

While paused, the worker keeps answering RabbitMQ's heartbeats, so a pause of
several minutes does not make the broker drop the connection and redeliver
the message behind the learner's back.
"""

import os
import select
import sys
from collections.abc import Callable
from io import TextIOBase
from typing import TextIO

CHECKPOINTS = ("before-write", "inside-transaction", "after-commit")
# --crash NAME -> (checkpoint, exit status). os._exit skips every cleanup, as a
# power cut would: no rollback handler, no ack, no connection close.
CRASHES = {"before": ("before-write", 21), "after": ("after-commit", 22)}


class Pause:
    """Where to stop (pause) or die (crash) in this worker process."""

    def __init__(
        self,
        *,
        at: str | None = None,
        crash: str | None = None,
        keepalive: Callable[[float], None] | None = None,
        stdin: TextIO | None = None,
        stdout: TextIO | TextIOBase | None = None,  # (TextIOBase: a command's OutputWrapper)
    ) -> None:
        if at is not None and at not in CHECKPOINTS:
            raise ValueError(f"Unknown checkpoint {at!r}; choose one of {', '.join(CHECKPOINTS)}.")
        if crash is not None and crash not in CRASHES:
            raise ValueError(f"Unknown crash point {crash!r}; choose one of {', '.join(CRASHES)}.")
        self.at = at
        self.crash = crash
        self.keepalive = keepalive
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.waiting = False

    def reached(self, name: str) -> None:
        if self.crash and CRASHES[self.crash][0] == name:
            status = CRASHES[self.crash][1]
            self.say(f"Crashing at {name} (exit {status}).")
            sys.stderr.flush()
            os._exit(status)
        if self.at == name:
            # Waiting from here on: a Ctrl+C that lands as "Paused" appears
            # leaves the pause, never waits for an Enter after it.
            self.waiting = True
            try:
                if self.keepalive is not None:
                    self.keepalive(0)  # the worker reports itself first: on screen "Paused" means status lists it
                self.say(f"Paused {name}.")  # the lesson's line, as docs/lab.md shows it
                self.say("Press Enter to go on, Ctrl+C to stop.")
                self.wait_for_enter()
            finally:
                self.waiting = False

    def say(self, line: str) -> None:
        self.stdout.write(line + "\n")
        self.stdout.flush()

    def wait_for_enter(self) -> None:
        """Return on Enter (or end of input); Ctrl+C raises KeyboardInterrupt."""
        self.waiting = True
        try:
            while True:
                # Look at stdin in short slices and let pika process I/O in between.
                ready, _, _ = select.select([self.stdin], [], [], 0.2)
                if ready:
                    self.stdin.readline()
                    return
                if self.keepalive is not None:
                    self.keepalive(0)
        finally:
            self.waiting = False


def checkpoint(pause: Pause | None, name: str) -> None:
    """Mark a named point in a handler; does nothing unless the worker was
    started with --pause or --crash for this point."""
    if pause is not None:
        pause.reached(name)
