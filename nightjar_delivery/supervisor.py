"""Several worker processes under one command (`nightjar_worker --serve
--processes N`): a parent that starts N children — each a normal worker
process run with the command's own arguments less --processes — watches them,
restarts one that dies, and stops them all on SIGTERM or Ctrl+C.

The parent takes no delivery and opens no connection: a child is exactly a
worker a person could have started by hand. So a child's death is handled as
any worker's death is: the broker gives its unacked deliveries back (RabbitMQ
when its connection closes; Redis Streams when the child restarted in its
place reads its own pending entries first, under the same consumer name), and
the worker that takes one again charges the death to it. Each child writes
its own row of the workers table (its host:pid)."""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from io import TextIOBase
from typing import TextIO

from nightjar_delivery import conf

# Set in each child's environment: its slot (1..N). Part of its Redis Streams
# consumer name (transport/redis_streams.py), stable across its restarts.
CHILD_VARIABLE = "NIGHTJAR_WORKER_CHILD"

# A child that dies within this many seconds of its start waits longer before the
# next start (doubling up to BACKOFF_MAX): a child that cannot start never spins.
STEADY_SECONDS = 30.0
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
POLL_SECONDS = 0.2


def child_suffix() -> str:
    """ "-<slot>" in a child of --processes, "" in a worker of its own."""
    slot = os.environ.get(CHILD_VARIABLE, "")
    return f"-{slot}" if slot else ""


def refusal(options: dict) -> str | None:
    """Why these nightjar_worker options cannot run as several processes, or None."""
    if not options["serve"]:
        return "--processes only makes sense with --serve."
    if options["pause"] or options["crash"]:
        return "--pause and --crash stop one worker at a checkpoint; run them without --processes."
    if options["metrics_port"] is not None or options["health_file"]:
        return (
            "--metrics-port and --health-file belong to one worker process; with --processes, run workers"
            " of their own instead, each with its port or file."
        )
    if not 1 <= options["processes"] <= 64:
        return "--processes must be between 1 and 64."
    return None


def without_processes(argv: list[str]) -> list[str]:
    """The command's arguments without --processes N (or --processes=N)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            kept.append(arg)
    return kept


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, so a
    parent killed with SIGKILL leaves no worker behind (systemd would kill the
    whole group anyway; a terminal or a test would not)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    slot: int
    proc: subprocess.Popen | None = None
    started: float = 0.0
    backoff: float = BACKOFF_MIN
    restart_at: float = 0.0  # monotonic; when proc is None
    deaths: list[int] = field(default_factory=list)


class Supervisor:
    """Starts, watches, restarts and stops the children; `run` returns the
    command's exit status (0 after a stop it was asked for)."""

    def __init__(self, *, command: list[str], processes: int, stdout: TextIO | TextIOBase, stop_seconds: float) -> None:
        self.command = command
        self.stdout = stdout
        self.stop_seconds = stop_seconds
        self.children = [Child(slot) for slot in range(1, processes + 1)]
        self.shutdown = False

    def say(self, line: str) -> None:
        self.stdout.write(line + "\n")
        self.stdout.flush()

    def start(self, child: Child) -> None:
        env = {**os.environ, CHILD_VARIABLE: str(child.slot)}
        child.proc = subprocess.Popen(
            self.command, env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, close_fds=True
        )
        child.started = time.monotonic()
        self.say(f"Worker process {child.slot} started (pid {child.proc.pid}).")

    def watch(self, child: Child) -> None:
        """One look at a child: note its death and schedule its restart, or restart it when due."""
        now = time.monotonic()
        if child.proc is None:
            if now >= child.restart_at:
                self.start(child)
            return
        status = child.proc.poll()
        if status is None:
            return
        # A child that lived long was a normal death: start again soon; one that died young waits longer each time.
        lived = now - child.started
        child.backoff = BACKOFF_MIN if lived >= STEADY_SECONDS else min(child.backoff * 2, BACKOFF_MAX)
        child.restart_at = now + child.backoff
        child.deaths.append(status)
        how = f"was killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        self.say(
            f"Worker process {child.slot} (pid {child.proc.pid}) {how}; starting it again in {child.backoff:.0f} s."
        )
        child.proc = None

    def run(self) -> int:
        def stop(signum, frame):
            self.shutdown = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.say(f"Starting {len(self.children)} worker processes; stop them all with SIGTERM or Ctrl+C.")
        try:
            while not self.shutdown:
                for child in self.children:
                    if not self.shutdown:
                        self.watch(child)
                time.sleep(POLL_SECONDS)
        finally:
            self.stop()
        return 0

    def stop(self) -> None:
        """SIGTERM to every child (each finishes its delivery and stops), then
        SIGKILL to any still running after stop_seconds (its delivery goes back
        to the broker and is charged the death, as under systemd's own kill)."""
        running = [child.proc for child in self.children if child.proc is not None and child.proc.poll() is None]
        self.say(f"Stopping {len(running)} worker processes (SIGTERM; SIGKILL after {self.stop_seconds:g} s).")
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_seconds
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"Worker process pid {proc.pid} did not stop within {self.stop_seconds:g} s; killing it.")
                proc.kill()
                proc.wait()
        self.say("All worker processes stopped.")


def supervise(*, argv: list[str], processes: int, stdout: TextIO | TextIOBase | None = None) -> int:
    # stdout: the command's (an OutputWrapper) or a file.
    """Run `processes` copies of this worker command (argv as the command got
    it, --processes included) until SIGTERM/SIGINT; the exit status."""
    from django.db import connections

    connections.close_all()  # the parent keeps none: the children open their own
    command = [sys.executable, *without_processes(argv)]
    return Supervisor(
        command=command,
        processes=processes,
        stdout=stdout or sys.stdout,
        stop_seconds=conf.NIGHTJAR_WORKER_STOP_SECONDS,
    ).run()
