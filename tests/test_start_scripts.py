"""The start scripts, when a port they need is taken: each says which port and
what holds it, exits non-zero, and its `stop` returns afterwards (issue 52: a
first bin/run printed "Starting rabbitmq..." and returned with status 1 and not
a word, and `bin/rabbitmq-node stop` then hung on rabbitmqctl)."""

import os
import socket
import subprocess
import time

import pytest

from devtools.ports import free_cluster_port, free_port

from .conftest import ROOT

pytestmark = [pytest.mark.system, pytest.mark.transport_free]

BIN = ROOT / "bin"


def listen(port):
    """A listener of this test's own on PORT: ss names this process as its holder."""
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen()
    return server


def run(*args, timeout=120):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


# What each script starts, and which of its ports the test holds: RabbitMQ's
# distribution port (PORT+20000), as in the issue; the others' only port.
SCRIPTS = {
    "rabbitmq-node": (lambda port: ("start", port), lambda: free_port(rabbitmq=True), 20000),
    "rabbitmq-cluster": (lambda port: ("start", 1, port), lambda: free_cluster_port(1), 20000),
    "redis-node": (lambda port: ("start", port), free_port, 0),
    "postgres-cluster": (lambda port: ("start", port), free_port, 0),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_start_script_names_the_taken_port_and_its_holder_and_stop_returns(tmp_path, script):
    arguments, pick, offset = SCRIPTS[script]
    base = pick()
    held = base + offset
    folder = tmp_path / "server"
    with listen(held):
        started = run(BIN / script, arguments(base)[0], folder, *arguments(base)[1:])
        assert started.returncode != 0, started.stdout
        assert f"port {held} is taken by " in started.stderr, started.stderr
        assert f"(pid {os.getpid()}" in started.stderr, started.stderr
        begun = time.monotonic()
        stopped = run(BIN / script, "stop", folder, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    print(f"{script} stop returned in {time.monotonic() - begun:.1f} s")


def test_a_rabbitmq_node_that_died_before_writing_its_log_is_reported(tmp_path):
    """The failure path itself, under the scripts' `set -euo pipefail`: no log
    to read (the node died first) must not end the script before its sentence,
    and a port taken meanwhile is named with its holder."""
    port = free_port()
    script = f'set -euo pipefail; . "{BIN}/lib/rabbitmq.sh"; boot_failure RabbitMQ "{tmp_path}/log/node.log" 0 "{tmp_path}/server.out" {port}; echo reported'
    with listen(port):
        result = run("bash", "-c", script)
    assert result.stdout.strip() == "reported", result.stderr
    assert "RabbitMQ did not start: its boot failed" in result.stderr
    assert f"port {port} is taken by " in result.stderr and f"(pid {os.getpid()}" in result.stderr


def test_bin_run_names_the_sites_port_and_its_holder_before_starting_anything(tmp_path):
    from tests.checkout import clean_env, copy_checkout

    checkout = copy_checkout(tmp_path / "checkout")
    port = free_port()
    with listen(port):
        result = subprocess.run(
            [checkout / "bin" / "run", "--no-worker"],
            capture_output=True,
            text=True,
            timeout=300,
            # A broker given: even a bin/run that missed the port would start no RabbitMQ of its own.
            env=clean_env(PORT=str(port), NIGHTJAR_BROKER_URL="amqp://guest:guest@127.0.0.1:9/%2F"),
            cwd=checkout,
        )
    assert result.returncode != 0
    assert f"The site (gunicorn) cannot start: port {port} is taken by " in result.stderr, result.stderr
    assert f"(pid {os.getpid()}" in result.stderr
    assert not (checkout / "db.sqlite3").exists()  # it stopped before anything: not even a migration
