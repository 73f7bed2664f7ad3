"""What both chaos soaks (bin/chaos_soak.py, bin/tasks_soak.py) do to their
workers: start one with its output in a log, and SIGKILL a random one every
0.3-1 s, starting a new one in its place; and their throwaway PostgreSQL
(--database postgres), which they also stop and start again mid-run."""

import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from devtools.ports import free_port

POSTGRES_CLUSTER = Path(__file__).resolve().parent.parent / "bin" / "postgres-cluster"


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


class Postgres:
    """A throwaway PostgreSQL cluster (bin/postgres-cluster) in a folder of its
    own (the soaks' folders are private to root; PostgreSQL runs as postgres),
    always on the same port, so its URL stays the workers' across a restart."""

    def __init__(self, prefix: str) -> None:
        self.folder, self.port = Path(tempfile.mkdtemp(prefix=prefix)), free_port()

    def _cluster(self, *args: str, check: bool = True) -> str:
        command = [str(POSTGRES_CLUSTER), *args]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120).stdout.strip()

    def start(self) -> str:
        """Its DATABASE_URL."""
        return self._cluster("start", str(self.folder), str(self.port))

    def restart(self, down_seconds: float = 2.0) -> None:
        """Stopped, down for down_seconds, started again."""
        self._cluster("stop", str(self.folder))
        time.sleep(down_seconds)
        self.start()

    def remove(self) -> None:
        self._cluster("stop", str(self.folder), check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
