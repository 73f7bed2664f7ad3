"""Past one machine: a three-node RabbitMQ cluster (bin/rabbitmq-cluster, on
loopback) with two gunicorn processes and three workers in service mode,
while nodes are killed for real. Every registration must end with exactly one
ticket, and every guest must get the registration page in time.

Runs on the suite's database (SQLite, and PostgreSQL in bin/test's second pass).
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from django.db import connection

from devtools import netns
from devtools.guest import Guest
from devtools.ports import free_cluster_port, free_port
from nightjar_delivery import transport
from nightjar_delivery.health import describe_replicas
from tests.conftest import ROOT, Process, database_url
from tests.helpers import until
from tickets.models import Registration, Ticket
from tickets.services.audit import audit_invariants
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import pending_registrations, register_guest

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True), pytest.mark.amqp_only]

CLUSTER = str(ROOT / "bin" / "rabbitmq-cluster")
# A guest's POST: the publish deadline (NIGHTJAR_BROKER_TIMEOUT, 1 s) plus the page.
POST_SECONDS = 3.0


class Cluster:
    def __init__(self, folder: Path, url: str, management_urls: list[str]) -> None:
        self.folder, self.url, self.management_urls = folder, url, management_urls
        self.down: set[int] = set()

    def run(self, *args: str, timeout: float = 400) -> str:
        result = subprocess.run([CLUSTER, *args], capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def kill(self, node: int) -> None:
        self.run("kill-node", str(self.folder), str(node))
        self.down.add(node)

    def start(self, *nodes: int) -> None:
        """Start stopped nodes together (each waits for the others' tables)."""
        procs = [
            subprocess.Popen([CLUSTER, "start-node", str(self.folder), str(n)], stdout=subprocess.DEVNULL)
            for n in nodes
        ]
        for proc in procs:
            assert proc.wait(timeout=400) == 0
        self.down -= set(nodes)

    def api(self, path: str):
        """The management API of the first node that answers."""
        for index, base in enumerate(self.management_urls, start=1):
            if index in self.down:
                continue
            request = urllib.request.Request(base + path, headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return json.load(response)
            except OSError:
                continue
        raise AssertionError("no management API answered")

    def node_index(self, name: str) -> int:
        return int(name.split("@")[0].rsplit("-", 1)[1])

    def leader(self, queue: str) -> int:
        """The node leading the queue, once it is one that is up (a minute at most)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError):
                leader = self.api(f"api/queues/%2F/{queue}").get("leader")
                if leader and self.node_index(leader) not in self.down:
                    return self.node_index(leader)
            time.sleep(0.5)
        raise AssertionError("the queue has no leader on a node that is up")

    def nodes_of(self, pids: list[int]) -> list[int]:
        """The nodes these processes' connections are on, one entry per connection."""
        names = {f"nightjar {name}" for name in self._names(pids)}
        return [
            self.node_index(c["node"])
            for c in self.api("api/connections")
            if c.get("client_properties", {}).get("connection_name") in names
        ]

    def node_of(self, pids: list[int]) -> int:
        """The node most of these processes' connections are on."""
        nodes = self.nodes_of(pids)
        assert nodes, "the workers have no connection"
        return max(set(nodes), key=nodes.count)

    @staticmethod
    def _names(pids: list[int]) -> list[str]:
        return [f"{socket.gethostname()}:{pid}" for pid in pids]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    base = free_cluster_port(3)
    result = subprocess.run([CLUSTER, "start", str(folder), "3", str(base)], capture_output=True, text=True)
    if result.returncode != 0:
        subprocess.run([CLUSTER, "stop", str(folder)], capture_output=True)
        pytest.fail(f"The three-node cluster did not start:\n{result.stderr}", pytrace=False)
    management = subprocess.run(
        [CLUSTER, "management-url", str(folder)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield Cluster(folder, result.stdout.strip(), management.split(";"))
    finally:
        subprocess.run([CLUSTER, "stop", str(folder)], capture_output=True, timeout=300)


@pytest.fixture
def on_cluster(cluster, settings, worker_env):
    """This test's settings, workers and web processes use the cluster."""
    settings.NIGHTJAR_BROKER_URL = worker_env["NIGHTJAR_BROKER_URL"] = cluster.url
    settings.RABBITMQ_MANAGEMENT_URL = worker_env["RABBITMQ_MANAGEMENT_URL"] = ";".join(cluster.management_urls)
    transport.reset()
    yield cluster
    for node in sorted(cluster.down):
        cluster.start(node)  # the next test finds all three running
    transport.reset()


def serve_webs(env: dict[str, str], count: int = 2):
    """gunicorn processes (as many web machines), each with two workers; yields their URLs."""
    servers, urls = [], []
    for _ in range(count):
        port = free_port()
        command = [sys.executable, "-m", "gunicorn", "nightjar.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
        web_env = {**env, "DJANGO_DEBUG": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
        servers.append(
            subprocess.Popen(command, cwd=ROOT, env=web_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            deadline = time.monotonic() + 30
            while subprocess.run(["curl", "-sf", "-o", "/dev/null", url + "/"]).returncode != 0:
                assert time.monotonic() < deadline, "gunicorn did not answer within 30 s"
                time.sleep(0.2)
        yield urls
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)


@pytest.fixture
def two_webs(on_cluster, worker_env):
    yield from serve_webs(worker_env)


class Load:
    """Guests registering at a steady rate through both web processes."""

    def __init__(self, urls: list[str], per_second: float = 8) -> None:
        self.urls, self.interval = urls, 1 / per_second
        self.results: list[tuple[int, bool, float]] = []  # status, registration page?, seconds
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        guests = [Guest(url) for url in self.urls]
        n = 0
        while not self.stop.is_set():
            started = time.monotonic()
            status, page, seconds = guests[n % len(guests)].register(f"Cluster Guest {n}", timeout=30)
            self.results.append((status, '<span class="code">R-' in page, seconds))
            n += 1
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=60)

    def check(self) -> None:
        assert self.results, "no registrations were posted"
        failed = [r for r in self.results if r[0] != 200 or not r[1]]
        assert not failed, f"{len(failed)} of {len(self.results)} guests did not get the registration page"
        slowest = max(seconds for _, _, seconds in self.results)
        print(f"{len(self.results)} POSTs, slowest {slowest:.2f} s")
        assert slowest < POST_SECONDS


def start_three_workers(workers):
    """Three workers in service mode (per delivery, batch, per delivery), once they serve."""
    procs = [
        workers.start("--serve", "--prefetch", "10"),
        workers.start("--serve", "--batch", "10"),
        workers.start("--serve", "--prefetch", "10"),
    ]
    for proc in procs:
        proc.wait_for("Serving")
    return procs


def check_the_outcome(load: "Load", procs) -> None:
    """Every guest got the page in time, every registration exactly one ticket, no worker died."""
    load.check()
    gap = finish_and_audit(len(load.results))
    print(f"longest gap between tickets: {gap:.1f} s")
    for proc in procs:
        assert proc.proc.poll() is None, "a worker died"


def finish_and_audit(expected: int, deadline_seconds: float = 180) -> float:
    """Reconcile until nothing is pending, then audit. Returns the longest gap in tickets."""
    deadline = time.monotonic() + deadline_seconds
    while pending_registrations().exists():
        assert time.monotonic() < deadline, f"{pending_registrations().count()} still pending"
        with contextlib.suppress(transport.BrokerError):
            reconcile_registrations(older_than=5)
        time.sleep(2)
    assert Registration.objects.count() == expected
    report = audit_invariants(pending_older_than=0)
    assert report.passed, report.violations
    assert Ticket.objects.count() == expected
    issued = sorted(Ticket.objects.values_list("issued", flat=True))
    return max((b - a).total_seconds() for a, b in zip(issued, issued[1:], strict=False))


def test_the_quorum_queue_has_a_replica_on_every_node_and_status_says_so(on_cluster):
    register_guest(name="Replica Check")
    counts = transport.queue_counts(transport.queue_name())
    assert len(counts["members"]) == 3 and sorted(counts["online"]) == sorted(counts["members"])
    line = describe_replicas(counts)
    assert line.startswith(f"leader {counts['leader']}; 3 of 3 members online")


def test_a_node_whose_port_is_taken_says_so_at_once_and_starts_once_it_is_free(on_cluster):
    """A restarted node that cannot listen (its port taken meanwhile by another
    program) would fail its boot: start-node says which port and what holds it
    within a minute, not after five of polling a node that is no longer there."""
    node = 3
    port = urlsplit(on_cluster.url.split(";")[node - 1]).port
    on_cluster.kill(node)
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 15
        while True:  # the killed node's listener closes a moment after kill -9
            try:
                squatter.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} still taken 15 s after the node was killed"
                time.sleep(0.2)
        squatter.listen()
        started = time.monotonic()
        result = subprocess.run(
            [CLUSTER, "start-node", str(on_cluster.folder), str(node)], capture_output=True, text=True, timeout=300
        )
        seconds = time.monotonic() - started
    print(f"start-node gave up after {seconds:.0f} s:\n{result.stderr}")
    assert result.returncode != 0
    assert f"Node {node} cannot start: port {port} is taken by " in result.stderr
    assert f"(pid {os.getpid()}" in result.stderr  # the squatter: this test
    assert seconds < 60, f"start-node took {seconds:.0f} s to give up"
    on_cluster.start(node)
    assert node not in on_cluster.down


def test_a_paused_node_that_does_not_resume_is_started_when_its_peers_come_back(on_cluster):
    """With two nodes killed, the third pauses (pause_minority) and holds the
    newest tables. RabbitMQ 3.10 can fail its resume when the others return
    (seen in the quorum test below: a feature flag sync failed) and never tries
    again, its database stopped: the returning nodes wait for its tables.
    Played here by ending its recovery process and stopping its Mnesia;
    start-node must notice and start the paused node's app, and all three run."""
    paused, lost = 3, (1, 2)
    for node in lost:
        on_cluster.kill(node)
    deadline = time.monotonic() + 60
    while on_cluster.run("ctl", str(on_cluster.folder), str(paused), "-q", "eval", "rabbit:is_running().") != "false":
        assert time.monotonic() < deadline, f"node {paused} did not pause"
        time.sleep(1)
    on_cluster.run(
        "ctl",
        str(on_cluster.folder),
        str(paused),
        "-q",
        "eval",
        "exit(whereis(rabbit_outside_app_process), kill), mnesia:stop().",
    )
    procs = [
        subprocess.Popen([CLUSTER, "start-node", str(on_cluster.folder), str(n)], stderr=subprocess.PIPE, text=True)
        for n in lost
    ]
    outputs = [proc.communicate(timeout=400)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    on_cluster.down -= set(lost)
    assert any(f"Node {paused} runs with its app stopped" in output for output in outputs), outputs
    register_guest(name="After The Pause")  # the queue has its quorum again
    counts = transport.queue_counts(transport.queue_name())
    assert sorted(counts["online"]) == sorted(counts["members"]) and len(counts["members"]) == 3


def test_killing_the_leader_and_then_the_workers_node_loses_nothing_and_duplicates_nothing(
    on_cluster, two_webs, workers
):
    procs = start_three_workers(workers)
    with Load(two_webs) as load:
        time.sleep(4)
        leader = on_cluster.leader(transport.queue_name())
        on_cluster.kill(leader)
        print(f"killed the leader, node {leader}")
        time.sleep(3)
        new_leader = on_cluster.leader(transport.queue_name())
        assert new_leader != leader
        on_cluster.start(leader)
        time.sleep(2)
        target = on_cluster.node_of([proc.proc.pid for proc in procs])
        on_cluster.kill(target)
        print(f"killed node {target}, where the workers were connected")
        time.sleep(5)
        on_cluster.start(target)
        time.sleep(3)
    check_the_outcome(load, procs)


@pytest.mark.parametrize("reconcile_every", [None, 5.0], ids=["no-reconcile-timer", "reconcile-every-5s"])
def test_registrations_right_after_the_leader_is_killed_each_get_one_ticket(
    on_cluster, workers, reconcile_every, caplog
):
    """The figure the operator cares about: from kill -9 of the quorum queue's
    leader to the last ticket of three registrations posted right after it. A
    publish refused during the election is tried again within its deadline,
    so they need not wait for reconcile. Printed, not asserted (timings
    belong in benchmarks); the assertion is one ticket each."""
    caplog.set_level("INFO", logger="tickets")
    caplog.set_level("INFO", logger="nightjar_delivery")
    timer = ["--reconcile-every", str(reconcile_every), "--older-than", "2"] if reconcile_every else []
    worker = workers.start("--serve", "--prefetch", "10", *timer)
    worker.wait_for("Serving")
    register_guest(name="Before The Kill")  # this process's publisher is connected
    leader = on_cluster.leader(transport.queue_name())
    on_cluster.kill(leader)
    killed = time.monotonic()
    guests = [register_guest(name=f"After The Kill {n}") for n in range(3)]
    while Ticket.objects.filter(registration__in=guests).count() < 3 and time.monotonic() - killed < 90:
        time.sleep(0.1)
    got = Ticket.objects.filter(registration__in=guests).count()
    figure = f"{time.monotonic() - killed:.1f} s" if got == 3 else f"only {got} of 3 within 90 s"
    refused = sum("refused a publish" in record.getMessage() for record in caplog.records)
    unpublished = sum("stored but not published" in record.getMessage() for record in caplog.records)
    print(
        f"leader node {leader} killed; last ticket of the three after: {figure} (reconcile timer {reconcile_every}; "
        f"{refused} refusal(s) tried again, {unpublished} publish(es) left for reconcile)"
    )
    on_cluster.start(leader)
    finish_and_audit(4)
    assert all(guest.tickets.count() == 1 for guest in guests)
    assert worker.proc.poll() is None, "the worker died"


def test_with_quorum_lost_guests_still_get_their_page_and_everything_is_finished_afterwards(
    on_cluster, two_webs, workers
):
    procs = start_three_workers(workers)
    with Load(two_webs) as load:
        time.sleep(3)
        survivor = on_cluster.leader(transport.queue_name())
        lost = [n for n in (1, 2, 3) if n != survivor]
        for node in lost:
            on_cluster.kill(node)
        print(f"killed nodes {lost}: no quorum for 20 s")
        time.sleep(20)
        on_cluster.start(*lost)
        time.sleep(5)
    check_the_outcome(load, procs)


# --- Network partitions: the nodes and one worker on "machines" of their own ---


@pytest.fixture
def partitioned(tmp_path, settings, worker_env):
    """Three nodes, each in a network namespace of its own (devtools/netns.py),
    plus a namespace "w" for one worker; torn down even when the test fails."""
    reason = netns.why_not()
    if reason:
        message = f"The partition test cannot run: {reason}."
        if os.environ.get("NIGHTJAR_REQUIRE_NETNS"):
            pytest.fail(message, pytrace=False)  # CI: never skipped
        pytest.skip(message)
    with netns.Network(["1", "2", "3", "w"]) as network:
        folder = tmp_path / "cluster"
        env = {
            **os.environ,
            "NIGHTJAR_CLUSTER_NETNS": ",".join(network.namespaces[n] for n in ("1", "2", "3")),
            "NIGHTJAR_CLUSTER_ADDRESSES": ",".join(network.address[n] for n in ("1", "2", "3")),
        }
        try:
            result = subprocess.run(
                [CLUSTER, "start", str(folder), "3", "5672"], env=env, capture_output=True, text=True, timeout=400
            )
            assert result.returncode == 0, f"The cluster in namespaces did not start:\n{result.stderr}"
            management = subprocess.run(
                [CLUSTER, "management-url", str(folder)], capture_output=True, text=True, check=True
            ).stdout.strip()
            cluster = Cluster(folder, result.stdout.strip(), management.split(";"))
            cluster.network = network
            settings.NIGHTJAR_BROKER_URL = worker_env["NIGHTJAR_BROKER_URL"] = cluster.url
            settings.RABBITMQ_MANAGEMENT_URL = worker_env["RABBITMQ_MANAGEMENT_URL"] = management
            transport.reset()
            yield cluster
        finally:
            for name in ("1", "2", "3", "w"):
                network.heal(name)
            subprocess.run([CLUSTER, "stop", str(folder)], capture_output=True, timeout=300)
            transport.reset()


def database_url_for_a_namespace() -> str:
    """The test database as a process in another namespace reaches it: SQLite
    is a file; PostgreSQL through its Unix socket (loopback is per namespace)."""
    url = database_url()
    if connection.vendor != "postgresql":
        return url
    with connection.cursor() as cursor:
        cursor.execute("SHOW unix_socket_directories")
        directory = cursor.fetchone()[0].split(",")[0].strip()
    params = connection.settings_dict
    return f"postgres://{params['USER']}:{params['PASSWORD']}@{quote(directory, safe='')}:{params['PORT']}/{params['NAME']}"


@pytest.mark.postgres
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL"),
    reason="the partition test runs in bin/test's PostgreSQL leg: its cut-off worker reaches the database"
    " from a namespace of its own, as a worker on another machine does (SQLite is a local file)",
)
def test_a_partitioned_leader_and_a_cut_off_worker_lose_nothing_and_duplicate_nothing(partitioned, worker_env, workers):
    network = partitioned.network
    procs = [workers.start("--serve", "--prefetch", "10"), workers.start("--serve", "--batch", "10")]
    # The third worker runs on a "machine" of its own, so its link alone can be cut.
    outside = {**worker_env, "DATABASE_URL": database_url_for_a_namespace()}
    command = network.prefix("w") + workers.command("--serve", "--prefetch", "10")
    cut_off = Process(
        subprocess.Popen(command, env=outside, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    )
    workers.running.append(cut_off.proc)
    for proc in [*procs, cut_off]:
        proc.wait_for("Serving", timeout=60)
    with contextlib.ExitStack() as stack:
        urls = stack.enter_context(contextlib.contextmanager(serve_webs)(worker_env))
        load = stack.enter_context(Load(urls))
        time.sleep(4)
        leader = partitioned.leader(transport.queue_name())
        started = time.monotonic()
        network.cut(str(leader))
        partitioned.down.add(leader)
        print(f"cut off the leader, node {leader}")
        new_leader = partitioned.leader(transport.queue_name())
        print(f"new leader: node {new_leader} after {time.monotonic() - started:.1f} s")
        time.sleep(12)
        network.heal(str(leader))
        partitioned.down.discard(leader)
        print("healed")
        all_online = lambda: len(transport.queue_counts(transport.queue_name()).get("online", [])) == 3  # noqa: E731
        try:
            until(all_online, 90, "the node to rejoin", every=1, ignoring=transport.BrokerError)
        except AssertionError:
            # Seen on 2 of 4 runs on 2026-11-30 (none before): the paused minority node stayed
            # wedged after the heal (its own stop hung too). Say so, restart it, and go on:
            # the promise below must hold either way.
            print(f"node {leader} did not rejoin within 90 s of the heal; restarting it (kill -9, start)")
            partitioned.kill(leader)
            partitioned.start(leader)
            until(all_online, 120, "the restarted node to rejoin", every=1, ignoring=transport.BrokerError)
        print(f"all three members online again {time.monotonic() - started:.1f} s after the cut")

        # A worker whose node was the one cut off is reconnecting (backoff up to 30 s): wait for it.
        # It says which node it serves from; the management API's listing can lag (CI, 2026-11-30).
        deadline = time.monotonic() + 60
        while (address := serving_address(cut_off)) is None:
            assert time.monotonic() < deadline, "the cut-off worker has no connection"
            time.sleep(1)
        node = next(int(n) for n in ("1", "2", "3") if network.address[n] == address)
        network.cut("w", only_from=str(node))
        print(f"cut the worker's machine off from node {node}, which it consumed from")
        cut_off.wait_for("is unavailable; reconnecting", timeout=60)
        serving = cut_off.wait_for("Serving", timeout=60)
        now_on = served_from(serving)
        assert now_on in {network.address[n] for n in ("1", "2", "3")} - {address}, serving
        print(f"the worker reconnected to {now_on}; node {node} is {address}")
        network.heal("w")
        time.sleep(3)
    check_the_outcome(load, [*procs, cut_off])


def serving_address(worker: Process) -> str | None:
    """The node address the worker last said it serves from, None while it
    is reconnecting (it said it lost that connection since)."""
    worker.read_so_far()
    for line in reversed(worker.lines):
        if "is unavailable; reconnecting" in line:
            return None
        if line.startswith("Serving "):
            return served_from(line)
    return None


def served_from(line: str) -> str:
    """The node address in a worker's "Serving <queue> from <address>:<port>" line."""
    return re.search(r" from ([\d.]+):\d+ ", line).group(1)
