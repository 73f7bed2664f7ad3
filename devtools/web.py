"""gunicorn serving Nightjar on a loopback port, for the tests and the
scripts in bin/: started, then waited for until a page answers."""

import subprocess
import sys
import time
from pathlib import Path

from devtools.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


class GunicornDidNotStart(RuntimeError):
    pass


def start_gunicorn(
    env: dict[str, str],
    *args: str,
    port: int | None = None,
    ready_path: str = "/healthz/live",
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    timeout: float = 30,
) -> tuple[subprocess.Popen, str]:
    """gunicorn (these arguments) on PORT (a free one by default); returns it
    and its URL once READY_PATH answers. If it does not within TIMEOUT, it is
    killed and GunicornDidNotStart says what it printed (when its stderr is
    a pipe)."""
    port = port or free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "nightjar.wsgi", *args, "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=stderr,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while subprocess.run(["curl", "-sf", "-o", "/dev/null", url + ready_path]).returncode != 0:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            said = server.communicate()[1] if stderr == subprocess.PIPE else ""
            raise GunicornDidNotStart(f"gunicorn did not answer within {timeout:g} s: {said}")
        time.sleep(0.2)
    return server, url
