"""The benchmark's throwaway stack, as context managers: each thing it
starts it stops on the way out, whatever ends the block (a failure, Ctrl+C,
or SIGTERM, which `signals_interrupt` turns into KeyboardInterrupt)."""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from devtools.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin"


@contextlib.contextmanager
def signals_interrupt():
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt while inside, as Ctrl+C
    does, so every `finally` below runs; the old handlers come back after."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    saved = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def scratch_folder(prefix: str, say):
    """A temporary folder (the SQLite database, the workers' logs): deleted
    when the block ends well, kept (and named) when it does not."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    except BaseException:
        say(f"The benchmark failed; the workers' logs and the database are kept in {folder}")
        raise
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def environment(**values: str | None):
    """os.environ with these values (None: unset) while inside; restored after."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def rabbitmq_node(folder: Path):
    """A RabbitMQ node of its own (bin/rabbitmq-node) in FOLDER: yields
    (its AMQP URL, its management URL); stopped on the way out."""
    port = free_port(rabbitmq=True)
    try:
        url = subprocess.run(
            [str(BIN / "rabbitmq-node"), "start", str(folder), str(port)], capture_output=True, text=True, check=True
        ).stdout.strip()
        yield url, f"http://127.0.0.1:{port + 10000}/"
    finally:
        subprocess.run([str(BIN / "rabbitmq-node"), "stop", str(folder)], capture_output=True)


@contextlib.contextmanager
def redis_node(folder: Path):
    """A redis-server of its own (bin/redis-node) in FOLDER: yields its URL."""
    try:
        url = subprocess.run(
            [str(BIN / "redis-node"), "start", str(folder), str(free_port())],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        yield url
    finally:
        subprocess.run([str(BIN / "redis-node"), "stop", str(folder)], capture_output=True)


@contextlib.contextmanager
def postgres_cluster():
    """A throwaway PostgreSQL cluster (bin/postgres-cluster) with a database
    of its own: yields its DATABASE_URL. Its folder is not under the scratch
    folder: PostgreSQL runs as postgres, and that one is private to root."""
    folder = Path(tempfile.mkdtemp(prefix="nightjar-bench-pg-"))
    try:
        yield subprocess.run(
            [str(BIN / "postgres-cluster"), "start", str(folder), str(free_port())],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    finally:
        subprocess.run([str(BIN / "postgres-cluster"), "stop", str(folder)], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def processes(procs: list[subprocess.Popen], *, timeout: float = 60):
    """PROCS (started by the caller) SIGTERMed and waited for on the way out;
    killed if one does not end within TIMEOUT."""
    try:
        yield procs
    finally:
        stop_all(procs, timeout=timeout)


def stop_all(procs: list[subprocess.Popen], *, timeout: float = 60) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
