"""The learner's second terminal: a fresh shell in the checkout, with nothing
exported, talks to what bin/run started there.

bin/run writes .run/local.env (git-ignored) when it starts: its own pid and
start time, then the settings it runs with (lab mode, the broker URL, the
database...). `manage.py` fills in from that file whatever the environment
does not already say, and only while that same bin/run is still alive: the
file of a bin/run that crashed (or was SIGKILLed, so could not remove it) is
stale — its pid is gone, or belongs now to another process (the start time
differs) — and is ignored, so lab mode is off again as it is without bin/run.
The next bin/run overwrites it. gunicorn, the tests and production never read
it: only manage.py does, and only this checkout's file (NIGHTJAR_RUN_FILE
names another; empty turns it off).

Usage from bin/run:  python -m nightjar.localrun write PID   (values from the environment)
                     python -m nightjar.localrun remove PID  (only if PID wrote it)
                     python -m nightjar.localrun owner       (prints the live owner's pid, if any)
"""

import os
import sys
from pathlib import Path

RUN_FILE = Path(__file__).resolve().parent.parent / ".run" / "local.env"
# What bin/run passes on: nothing else is read from the file.
KEYS = (
    "NIGHTJAR_LAB",
    "DJANGO_DEBUG",
    "NIGHTJAR_BROKER_URL",
    "RABBITMQ_MANAGEMENT_URL",
    "DATABASE_URL",
    "NIGHTJAR_QUEUE",
    "NIGHTJAR_LAB_DIR",
)


def run_file(environ=os.environ) -> Path | None:
    name = environ.get("NIGHTJAR_RUN_FILE")
    if name is None:
        return RUN_FILE
    return Path(name) if name.strip() else None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22), so a reused pid is not taken for the bin/run that wrote the
    file; None when no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def read(path: Path) -> tuple[int, dict[str, str]] | None:
    """(pid, values) of a live bin/run's file, None if absent or stale."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    values = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    try:
        pid = int(values.pop("BIN_RUN_PID"))
    except (KeyError, ValueError):
        return None
    started = values.pop("BIN_RUN_STARTED", None)
    if started is None or start_time(pid) != started:
        return None
    return pid, {key: value for key, value in values.items() if key in KEYS}


def load(environ=os.environ) -> int | None:
    """Fill in environ from a live bin/run's file (the environment wins);
    the pid of that bin/run, or None."""
    path = run_file(environ)
    found = read(path) if path else None
    if found is None:
        return None
    pid, values = found
    for key, value in values.items():
        environ.setdefault(key, value)
    return pid


def main(argv: list[str]) -> int:
    command, *rest = argv or ["owner"]
    path = run_file() or RUN_FILE
    found = read(path)
    if command == "owner":
        if found:
            print(found[0])
        return 0
    pid = int(rest[0])
    if command == "write":
        started = start_time(pid)
        if started is None:
            print(f"no process {pid}", file=sys.stderr)
            return 1
        lines = [
            f"# Written by the run script (pid {pid}; bin/run, or the tasks demo's run); removed when it stops."
            " manage.py reads it only while that run runs.",
            f"BIN_RUN_PID={pid}",
            f"BIN_RUN_STARTED={started}",
        ]
        lines += [f"{key}={os.environ[key]}" for key in KEYS if os.environ.get(key)]
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text("\n".join(lines) + "\n")
        partial.chmod(0o600)
        partial.replace(path)
        return 0
    if command == "remove":
        if found and found[0] == pid:
            path.unlink(missing_ok=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
