"""A copy of this checkout for tests that run bin/run the way a learner does:
its own .run, lab/ and db.sqlite3, the same .venv (a symlink), and ports of
its own, so nothing the tests start touches the developer's checkout."""

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from devtools.ports import free_port
from tests.conftest import ROOT


def copy_checkout(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in listed)):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    (target / ".venv").symlink_to(ROOT / ".venv")
    return target


def clean_env(**extra: str) -> dict[str, str]:
    """A fresh terminal's environment: PATH, HOME and LANG, nothing else."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        **extra,
    }


class LocalRun:
    """`bin/run --no-worker` in a copy of the checkout, on ports of its own."""

    def __init__(self, checkout: Path, broker: str) -> None:
        self.checkout = checkout
        self.broker = broker
        self.port = free_port()
        self.broker_port = free_port(rabbitmq=broker == "rabbitmq")
        self.output: list[str] = []
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> str:
        env = clean_env(PORT=str(self.port), NIGHTJAR_BROKER_PORT=str(self.broker_port))
        if self.broker == "redis":
            env["NIGHTJAR_BROKER"] = "redis"
        self.process = subprocess.Popen(
            ["bin/run", "--no-worker"],
            cwd=self.checkout,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        ready = threading.Event()

        def pump() -> None:
            for line in self.process.stdout:
                self.output.append(line)
                if line.startswith("Nightjar is running at"):
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.process.poll() is not None:
            self.stop()
            raise AssertionError("bin/run did not start:\n" + "".join(self.output))
        return "".join(self.output)

    def stop(self) -> str:
        """Ctrl+C in bin/run's terminal."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                # Its broker runs in a session of its own: stopped as bin/run would have.
                broker = f"bin/{self.broker}-node"
                subprocess.run([broker, "stop", f".run/{self.broker}"], cwd=self.checkout, capture_output=True)
        time.sleep(0)  # let the pump thread read the last lines
        return "".join(self.output)
