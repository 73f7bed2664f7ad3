"""What is particular to the Redis Streams transport, against a real
redis-server of the test's own (AOF, appendfsync always) and real worker
processes: claims of entries whose worker was killed, entries trimmed before
they were handled, a server killed -9 mid-run, and what an acknowledged XADD
survives."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import redis

from devtools.ports import free_port
from nightjar_delivery import transport
from nightjar_delivery.transport import redis_streams
from tests.conftest import ROOT
from tickets.models import DeliveryFailure, Registration
from tickets.services.reconcile import reconcile_registrations
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


class RedisServer:
    def __init__(self, folder, port: int) -> None:
        self.folder, self.port = folder, port
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> None:
        subprocess.run([ROOT / "bin" / "redis-node", "start", str(self.folder), str(self.port)], check=True)

    def stop(self) -> None:
        subprocess.run([ROOT / "bin" / "redis-node", "stop", str(self.folder)], check=True)

    def kill_9(self) -> None:
        os.kill(int((self.folder / "redis.pid").read_text()), signal.SIGKILL)
        time.sleep(0.2)

    def cli(self, *args: str) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, check=True
        ).stdout.strip()


@pytest.fixture
def redis_server(tmp_path, settings, workers, worker_env):
    """A redis-server of this test's own; the test's process and workers use it."""
    server = RedisServer(tmp_path / "redis", free_port())
    server.start()
    settings.NIGHTJAR_BROKER_URL = server.url
    workers.env = {**worker_env, "NIGHTJAR_BROKER_URL": server.url, "NIGHTJAR_CLAIM_IDLE_SECONDS": "1"}
    transport.reset()
    yield server
    transport.reset()
    server.stop()


def as_consumer(workers, name: str) -> dict:
    return {**workers.env, "NIGHTJAR_CONSUMER_NAME": name}


def test_an_entry_whose_worker_was_killed_is_claimed_by_another_and_makes_one_ticket(redis_server, workers):
    registration = register_guest(name="Claimed Guest")
    first = workers.start("--pause", "after-commit", env=as_consumer(workers, "first"))
    first.wait_for("Paused after-commit.")  # committed, not acknowledged
    first.proc.kill()
    first.proc.wait()
    assert registration.tickets.count() == 1
    assert "first" in redis_server.cli("XINFO", "CONSUMERS", transport.queue_name(), "nightjar")

    second = workers.start("--serve", env=as_consumer(workers, "second"))
    # Idle for NIGHTJAR_CLAIM_IDLE_SECONDS (1 s here), then XAUTOCLAIM hands it over.
    second.wait_for(f"Received {registration.code} redelivered=True", timeout=30)
    second.wait_for("Handler returned.")
    assert registration.tickets.count() == 1  # the completion key made the repeat harmless
    assert transport.queue_counts(transport.queue_name())["unacked"] == 0


def test_an_entry_trimmed_before_it_was_handled_is_reported_and_reconcile_republishes_it(redis_server, workers):
    registration = register_guest(name="Trimmed Guest")
    holder = workers.start("--pause", "before-write", env=as_consumer(workers, "holder"))
    holder.wait_for("Paused before-write.")
    holder.proc.kill()
    holder.proc.wait()
    redis_server.cli("XTRIM", transport.queue_name(), "MAXLEN", "0")  # as MAXLEN trimming would

    time.sleep(1.1)  # idle past NIGHTJAR_CLAIM_IDLE_SECONDS
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "worker"],
        env=as_consumer(workers, "claimer"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "was trimmed before it was handled; reconcile republishes it." in result.stdout
    assert "No ready registrations" in result.stdout
    assert not registration.tickets.exists()
    # Staff see it beside the failed attempts, with the entry's id.
    (record,) = DeliveryFailure.objects.all()
    entry = re.search(r"Redis entry (\S+) was trimmed", result.stdout).group(1)
    assert record.error == f"Entry {entry} of {transport.queue_name()} was trimmed before it was handled"
    assert record.worker.startswith(f"{socket.gethostname()}:") and record.registration is None

    reconcile_registrations(older_than=0)
    assert f"Received {registration.code} redelivered=False" in workers.run().stdout
    assert registration.tickets.count() == 1


def test_redis_killed_and_restarted_mid_run_loses_no_registration(redis_server, workers):
    worker = workers.start("--serve", "--batch", "10", env=as_consumer(workers, "steady"))
    worker.wait_for("Serving")
    for n in range(40):
        register_guest(name=f"Steady {n}")
        if n == 20:
            redis_server.kill_9()
            redis_server.start()  # the AOF brings back every acknowledged entry
    deadline = time.monotonic() + 60
    while Registration.objects.filter(tickets__isnull=True).exists():
        reconcile_registrations(older_than=0)  # what the outage left unpublished
        assert time.monotonic() < deadline, "not every registration got its ticket"
        time.sleep(1)
    assert all(r.tickets.count() == 1 for r in Registration.objects.all())
    assert worker.proc.poll() is None  # reconnected, still serving


def test_every_acknowledged_xadd_survives_a_kill_9(redis_server):
    """Four publishers XADD as fast as Redis answers; the server is killed -9
    mid-stream. After a restart every entry Redis acknowledged is there, by
    id, and the only extras are the in-flight ones (sent, reply lost: at most
    one per publisher, and harmless: the completion key absorbs a repeat)."""
    script = (
        "import sys\n"
        "from nightjar_delivery import transport\n"
        "for n in range(1_000_000):\n"
        "    try:\n"
        "        transport.publish(b'{}', message_id=f'{sys.argv[1]}-{n}', queue=transport.queue_name())\n"
        "    except transport.BrokerError:\n"
        "        break\n"
        "    print(n, flush=True)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "nightjar.settings", "NIGHTJAR_BROKER_URL": redis_server.url}
    env["NIGHTJAR_QUEUE"] = transport.queue_name()
    publishers = [
        subprocess.Popen(
            [sys.executable, "-c", f"import django; django.setup()\n{script}", f"p{i}"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    acknowledged = [0] * len(publishers)
    try:
        for line in publishers[0].stdout:
            acknowledged[0] = int(line) + 1
            if acknowledged[0] == 1000:
                redis_server.kill_9()
        for i, publisher in enumerate(publishers):
            for line in publisher.stdout:
                acknowledged[i] = int(line) + 1
            publisher.wait(timeout=30)
    finally:
        for publisher in publishers:
            publisher.kill()
    redis_server.start()
    entries = redis_server.cli("XRANGE", transport.queue_name(), "-", "+").split()
    survived = {value for value in entries if re.fullmatch(r"p\d-\d+", value)}
    for i, count in enumerate(acknowledged):
        missing = {f"p{i}-{n}" for n in range(count)} - survived
        assert not missing, f"publisher {i}: {len(missing)} acknowledged entries lost"
        extra = {value for value in survived if value.startswith(f"p{i}-")} - {f"p{i}-{n}" for n in range(count)}
        assert extra <= {f"p{i}-{count}"}, extra  # at most its one in-flight XADD
    print(f"acknowledged {sum(acknowledged)} XADDs before the kill -9 (4 publishers); {len(survived)} survived,")
    print(f"  {len(survived) - sum(acknowledged)} of them in flight when the server died")
    assert sum(acknowledged) >= 1000


def test_a_consumer_reading_ahead_holds_no_more_than_its_prefetch_and_acks_only_what_was_acked(redis_server):
    """Service mode per delivery: the next read goes out with the acks while
    the buffer still holds entries. Each entry is handed out once, in order;
    it stays pending until its ack; what is pending never exceeds the
    prefetch; after a hand-back the own pending list comes first, and what a
    read-ahead brought meanwhile is not handed out twice."""
    queue = transport.queue_name()
    for n in range(12):
        transport.publish(f"{n}".encode(), message_id=f"m{n}", queue=queue)
    consumer = redis_streams.Consumer(prefetch=4, queue=queue)

    def pending() -> list[str]:
        return redis_server.cli("XPENDING", queue, "nightjar", "-", "+", "100").split()[::4]

    seen, handed_back = [], None
    try:
        for delivery in consumer.consume(idle_seconds=0.2):
            if delivery is None:
                break
            assert delivery.tag in pending()  # not acknowledged before its ack
            assert len(pending()) <= 4
            if delivery.body == b"5" and handed_back is None:
                handed_back = delivery.tag  # a failure: 5 goes back, with 6, 7 and 8 read ahead behind it
                consumer.requeue(delivery.tag)
                continue
            seen.append((delivery.body, delivery.redelivered))
            consumer.ack(delivery.tag, flush=False)
    finally:
        consumer.close()
    assert [int(body) for body, _ in seen] == list(range(12))
    assert [int(body) for body, again in seen if again] == [5, 6, 7, 8]  # from the own pending list, once each
    assert pending() == []


def test_a_read_ahead_whose_send_broke_midway_hands_out_what_it_may_have_read_at_once(redis_server, monkeypatch):
    """The read-ahead's write reached the server (its XREADGROUP made two
    entries pending here) and then the connection broke: those entries are
    this consumer's own pending ones, read next, not left for a claim a
    minute later."""
    queue = transport.queue_name()
    for n in range(8):
        transport.publish(f"{n}".encode(), message_id=f"m{n}", queue=queue)
    consumer = redis_streams.Consumer(prefetch=4, queue=queue)
    send = redis.connection.AbstractConnection.send_packed_command
    armed = []

    def sent_then_broke(connection, command, check_health=True):
        send(connection, command, check_health)
        if armed:
            armed.clear()
            raise redis.exceptions.ConnectionError("Connection lost after the write")

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", sent_then_broke)
    seen = []
    try:
        for delivery in consumer.consume(idle_seconds=0.2):
            if delivery is None:
                break
            seen.append((int(delivery.body), delivery.redelivered))
            if delivery.body == b"1":
                armed.append(True)  # this ack starts the read-ahead (two left of four)
            consumer.ack(delivery.tag, flush=False)
    finally:
        consumer.close()
    assert not armed  # the read-ahead was sent, and broke
    assert sorted(body for body, _ in seen) == list(range(8))  # each once, none waiting for a claim
    assert redis_server.cli("XPENDING", queue, "nightjar", "-", "+", "100") == ""


def test_a_stock_redis_is_refused_by_the_publish_the_worker_and_check_each_naming_the_two_settings(
    redis_server, workers
):
    redis_server.cli("CONFIG", "SET", "appendonly", "no")  # as a stock redis-server runs
    transport.reset()
    with pytest.raises(transport.BrokerError) as refused:
        transport.publish(b"{}", message_id="m-1", queue=transport.queue_name())
    worker = workers.run("--drain")
    deploy = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=workers.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    for said in (str(refused.value), worker.stderr, deploy.stderr):
        assert "appendonly yes" in said and "appendfsync always" in said and "CONFIG SET" in said
        assert "bin/redis-node" not in said
    assert worker.returncode == 2
    assert "nightjar.E003" in deploy.stderr
    assert redis_server.cli("XLEN", transport.queue_name()) == "0"
    redis_server.cli("CONFIG", "SET", "appendonly", "yes")  # set as the message says: published again
    transport.reset()  # (the publisher's backoff after a failure)
    transport.publish(b"{}", message_id="m-2", queue=transport.queue_name())
    assert redis_server.cli("XLEN", transport.queue_name()) == "1"
