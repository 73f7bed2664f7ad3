"""What both chaos soaks (bin/chaos_soak.py, bin/tasks_soak.py) do to their
workers: start one with its output in a log, and SIGKILL a random one every
0.3-1 s, starting a new one in its place."""

import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path


def start_logged(command: list[str], *, env: dict, log: Path) -> subprocess.Popen:
    """A worker process, its stdout and stderr in log, no stdin."""
    with open(log, "w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def kill_at_random(
    workers: list[subprocess.Popen], restart: Callable[[int], None], *, stop: threading.Event, seed
) -> None:
    """Until stop is set: every 0.3-1 s SIGKILL a random one of workers, wait
    for it, then restart(index) (which puts the new process in its slot)."""
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(0.3, 1.0)):
        index = rng.randrange(len(workers))
        workers[index].kill()
        workers[index].wait()
        restart(index)


def manage(manage_py: Path, *args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` of the project under test, its output captured;
    with check, a failure raises with that output."""
    result = subprocess.run(
        [sys.executable, str(manage_py), *args], env=env, capture_output=True, text=True, timeout=300
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result
