#!/usr/bin/env python3
"""Chaos soak: prove "every registration ends with exactly one ticket" under
real faults, on loopback only, bounded in count and time.

    .venv/bin/python bin/chaos_soak.py [--registrations 2000] [--workers 3]

It starts its own RabbitMQ node and gunicorn (and uses a fresh SQLite file
unless DATABASE_URL is set), posts N registrations through the web stack,
runs 3 workers in service mode while SIGKILLing a random one every 0.3-1 s
(and restarting it), stops and restarts RabbitMQ once mid-run, then runs
reconcile until nothing is pending and finally `audit`, which must pass with
exactly N tickets. Exit status 0 only then.

    --transport redis          Redis Streams instead (redis-server stopped and restarted mid-run)
    --transport database       no broker: the queue is a table of the database (db://default); with
                               --database postgres, PostgreSQL itself is stopped and started again
                               mid-run (the guests wait at the door meanwhile: the site is down, and
                               what is proven is the workers' and the queue's side); on SQLite there
                               is no server to restart
    --cluster 3                a three-node RabbitMQ cluster (bin/rabbitmq-cluster); instead of the
                               restart, the quorum queue's leader is killed -9 mid-run and started again,
                               and (as root, nodes in network namespaces) the leader is cut off for 12 s
    --database postgres        a throwaway PostgreSQL cluster (bin/postgres-cluster) instead of SQLite
    --capacity 150             the evening has 150 seats: the registrations beyond wait, in order
    --cancellations 40         guests cancel 40 random registrations through their pages while it runs;
                               then audit must pass, confirmed = capacity (or fewer if the list ran out),
                               and every confirmed guest has exactly one ticket (none made after a cancel)
    --mail                     every guest gives an address; two mail senders run (SIGKILLed at random
                               too), the SMTP server (aiosmtpd, in this process) refuses a tenth of the
                               mails for now (451) and is stopped and started again once. Counted at the
                               server: each fact's mail arrived, no mail without its fact, and every
                               duplicate has one Message-ID and a sender kill between its two copies
"""

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PYTHON = sys.executable

from devtools import chaos, netns  # noqa: E402
from devtools.guest import Guest  # noqa: E402
from devtools.mailserver import MailServer  # noqa: E402
from devtools.ports import free_cluster_port, free_port  # noqa: E402
from devtools.web import start_gunicorn  # noqa: E402


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.folder = Path(tempfile.mkdtemp(prefix="nightjar-chaos-"))
        self.broker = {"redis": "redis", "database": "database"}.get(args.transport, "rabbitmq")
        self.cluster = args.cluster if self.broker == "rabbitmq" else 0
        self.rabbit_dir = self.folder / self.broker
        if self.cluster:
            self.rabbit_port = free_cluster_port(self.cluster)
        else:
            self.rabbit_port = free_port(rabbitmq=self.broker == "rabbitmq")
        self.web_port = free_port()
        self.postgres = chaos.Postgres("nightjar-chaos-pg-") if args.database == "postgres" else None
        if self.postgres:
            database_url = self.postgres.start()
        else:
            database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{self.folder / 'chaos.sqlite3'}"
        self.leader_kills = self.partitions = self.database_restarts = 0
        # --transport database: the guests wait while PostgreSQL restarts (set: they may post).
        self.door_open = threading.Event()
        self.door_open.set()
        self.in_flight = 0
        # With a cluster, its nodes run on "machines" of their own (network
        # namespaces) so that one can be cut off; that needs root and iptables.
        self.network: netns.Network | None = None
        self.no_partition = ""
        if self.cluster:
            self.no_partition = netns.why_not()
            if self.no_partition and os.environ.get("NIGHTJAR_REQUIRE_NETNS"):
                raise SystemExit(f"The cluster soak cannot partition the network: {self.no_partition}.")
            if not self.no_partition:
                self.network = netns.Network([str(i) for i in range(1, self.cluster + 1)])
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "NIGHTJAR_QUEUE": "nightjar.chaos",
            "DJANGO_DEBUG": "0",
            # Debug off: the site starts only on a real key (nightjar/keys.py).
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_SECURE_COOKIES": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "NIGHTJAR_REGISTRATIONS_PER_MINUTE": "0",
            "NIGHTJAR_LOG_FORMAT": "plain",
            # Its own static files: collectstatic rewrites every hashed file, and
            # the checkout's are read meanwhile by whatever else runs in it.
            "NIGHTJAR_STATIC_ROOT": str(self.folder / "static"),
            # Killed workers' entries are claimed by the others quickly (Redis Streams).
            "NIGHTJAR_CLAIM_IDLE_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
        }
        self.workers: list[subprocess.Popen | None] = [None] * args.workers
        self.worker_logs: list[Path] = []
        self.kills = self.restarts = self.broker_restarts = 0
        self.statuses: dict[int | str, int] = {}
        self.posted = 0
        self.pages: list[str] = []  # the registrations' pages, for the cancellations
        self.cancel_statuses: dict[int | str, int] = {}
        self.lock = threading.Lock()
        self.stop_chaos = threading.Event()
        # --mail: the SMTP server, the senders and when each was killed.
        self.smtp = MailServer() if args.mail else None
        self.senders: list[subprocess.Popen | None] = [None, None] if args.mail else []
        self.sender_kills: list[float] = []
        self.mail_killer: threading.Thread | None = None
        self.smtp_restarts = 0
        if self.smtp:
            self.smtp.rules.temporary = 0.1
            self.env.update(
                NIGHTJAR_SMTP_HOST=self.smtp.host,
                NIGHTJAR_SMTP_PORT=str(self.smtp.port),
                NIGHTJAR_SITE_URL=f"http://127.0.0.1:{self.web_port}",
                # Quick retries, a short lease (longer than ten waits), attempts enough to outlast the faults.
                NIGHTJAR_SMTP_TIMEOUT="0.5",
                NIGHTJAR_MAIL_LEASE_SECONDS="6",
                NIGHTJAR_MAIL_RETRY_SECONDS="0.2",
                NIGHTJAR_MAIL_ATTEMPTS="100",
            )

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {line}", flush=True)

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return chaos.manage(ROOT / "manage.py", *args, env=self.env, check=check)

    def restart_database(self) -> None:
        """--transport database: stop PostgreSQL for 2 s and start it again while the workers
        work through the queue in it. The guests wait first (the site is down meanwhile, its
        pages an error: what the restart proves is the workers' and the queue's side)."""
        if not self.postgres:
            self.say(f"{self.posted} posted; the queue is the SQLite file: no database server to restart")
            return
        self.door_open.clear()
        while True:
            with self.lock:
                if not self.in_flight:
                    break
            time.sleep(0.05)
        self.say(f"{self.posted} posted; the guests wait; PostgreSQL stopped for 2 s")
        self.postgres.restart(2)
        self.say(f"{self.posted} posted; PostgreSQL started again")
        self.database_restarts += 1
        self.door_open.set()

    def rabbit(self, action: str) -> None:
        """Start or stop the broker (a RabbitMQ node or cluster, or redis-server with --transport redis);
        with --transport database there is none: the workers' URL names the database."""
        if self.broker == "database":
            if action == "start":
                self.env["NIGHTJAR_BROKER_URL"] = "db://default"
            return
        if self.cluster:
            cluster = str(ROOT / "bin" / "rabbitmq-cluster")
            if action == "stop":
                subprocess.run([cluster, "stop", str(self.rabbit_dir)], capture_output=True, timeout=300)
                return
            start = [cluster, "start", str(self.rabbit_dir), str(self.cluster), str(self.rabbit_port)]
            env = {**os.environ}
            if self.network:
                nodes = [str(i) for i in range(1, self.cluster + 1)]
                env["NIGHTJAR_CLUSTER_NETNS"] = ",".join(self.network.namespaces[n] for n in nodes)
                env["NIGHTJAR_CLUSTER_ADDRESSES"] = ",".join(self.network.address[n] for n in nodes)
            self.env["NIGHTJAR_BROKER_URL"] = subprocess.run(
                start, env=env, capture_output=True, text=True, timeout=600, check=True
            ).stdout.strip()
            self.env["RABBITMQ_MANAGEMENT_URL"] = subprocess.run(
                [cluster, "management-url", str(self.rabbit_dir)], capture_output=True, text=True, check=True
            ).stdout.strip()
            return
        command = [str(ROOT / "bin" / f"{self.broker}-node"), action, str(self.rabbit_dir)]
        if action == "start":
            command.append(str(self.rabbit_port))
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        if action == "start":
            self.env["NIGHTJAR_BROKER_URL"] = result.stdout.strip()
            self.env["RABBITMQ_MANAGEMENT_URL"] = f"http://127.0.0.1:{self.rabbit_port + 10000}/"

    def leader(self) -> tuple[str, str]:
        """The quorum queue's leader: (node number, node name)."""
        cluster = str(ROOT / "bin" / "rabbitmq-cluster")
        for asked in range(1, self.cluster + 1):
            queues = subprocess.run(
                [cluster, "ctl", str(self.rabbit_dir), str(asked), "list_queues", "-q", "name", "leader"],
                capture_output=True,
                text=True,
            ).stdout
            for line in queues.splitlines():
                if line.split()[:1] == ["nightjar.chaos"] and len(line.split()) == 2:
                    leader = line.split()[1]
                    return leader.split("@")[0].rsplit("-", 1)[1], leader
        raise RuntimeError("No node knows the queue's leader")

    def partition(self) -> None:
        """Cut the leader's namespace off from everything for 12 s, then heal."""
        node, leader = self.leader()
        self.say(f"{self.posted} posted; cutting off the queue's leader, node {node} ({leader}), for 12 s")
        self.network.cut(node)
        self.partitions += 1
        time.sleep(12)
        self.network.heal(node)
        self.say(f"{self.posted} posted; healed")

    def kill_leader(self) -> None:
        """kill -9 the node that leads the quorum queue, then start it again."""
        cluster = str(ROOT / "bin" / "rabbitmq-cluster")
        node, leader = self.leader()
        self.say(f"{self.posted} posted; kill -9 the queue's leader, node {node} ({leader})")
        subprocess.run([cluster, "kill-node", str(self.rabbit_dir), node], check=True)
        self.leader_kills += 1
        time.sleep(3)
        self.say(f"{self.posted} posted; starting node {node} again")
        subprocess.run([cluster, "start-node", str(self.rabbit_dir), node], check=True, timeout=600)
        self.broker_restarts += 1

    def start_worker(self, index: int) -> None:
        log = self.folder / f"worker-{index}-{len(self.worker_logs)}.log"
        self.worker_logs.append(log)
        command = [PYTHON, str(ROOT / "manage.py"), "worker", "--serve", "--prefetch", "10"]
        # One consumer name per slot, kept across restarts, as a service instance would.
        env = {**self.env, "NIGHTJAR_CONSUMER_NAME": f"chaos-{index}"}
        self.workers[index] = chaos.start_logged(command, env=env, log=log)

    def chaos(self) -> None:
        """SIGKILL a random worker every 0.3-1 s and start a new one in its place."""
        chaos.kill_at_random(self.workers, self.killed, stop=self.stop_chaos, seed=self.args.seed)

    def start_sender(self, index: int) -> None:
        log = self.folder / f"sender-{index}-{len(self.sender_kills)}.log"
        command = [PYTHON, str(ROOT / "manage.py"), "send_mail", "--serve", "--poll", "0.2"]
        self.senders[index] = chaos.start_logged(command, env=self.env, log=log)

    def sender_killed(self, index: int) -> None:
        self.sender_kills.append(time.monotonic())
        self.start_sender(index)

    def mail_chaos(self) -> None:
        """SIGKILL a random mail sender every 0.3-1 s, as the workers."""
        seed = None if self.args.seed is None else self.args.seed + 1
        chaos.kill_at_random(self.senders, self.sender_killed, stop=self.stop_chaos, seed=seed)

    def outbox(self) -> dict:
        """The outbox and the facts, read as data: each mail (Message-ID, kind,
        registration, state) and each registration (seat, promoted, tickets)."""
        script = (
            "import json; from mail.models import Mail; from tickets.models import Registration; "
            "from django.db.models import Count; "
            "print(json.dumps({'mails': list(Mail.objects.values_list('message_id', 'kind', 'registration_id', 'state')), "
            "'registrations': list(Registration.objects.annotate(n=Count('tickets')).values_list("
            "'pk', 'seat', 'promoted', 'n', 'email'))}, default=str))"
        )
        return json.loads(self.manage("shell", "-c", script).stdout.strip().splitlines()[-1])

    def killed(self, index: int) -> None:
        self.kills += 1
        self.start_worker(index)
        self.restarts += 1

    def post_registrations(self, names: list[str]) -> None:
        """One browser-like client: GET the form (cookie, token, key), POST it,
        then GET the registration page it was sent to."""
        # Redirects are followed by hand, and every response is closed at once:
        # gunicorn lingers up to 2 s on a connection whose client keeps it open.
        base = f"http://127.0.0.1:{self.web_port}"
        guest = Guest(base, follow_redirects=False)
        # --rate: the four clients together post about that many per second.
        interval = 4 / self.args.rate if self.args.rate else 0.0
        for name in names:
            if interval:
                time.sleep(interval)
            self.door_open.wait()
            with self.lock:
                self.in_flight += 1
            status: int | str
            try:
                email = f"{name.lower().replace(' ', '.')}@example.org" if self.smtp else ""
                status, _, _ = guest.register(name, timeout=30, headers={"Referer": base}, email=email)
                if status != 302 or not guest.location.startswith("/registrations/R-"):
                    status = f"{status} without a registration"
                else:
                    with self.lock:
                        self.pages.append(guest.location)
                    status, _ = guest.get(guest.location, timeout=30)  # the registration page
            except OSError as error:
                status = type(error).__name__
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1
                self.posted += 1
                self.in_flight -= 1

    def cancel_some(self) -> None:
        """Guests cancel --cancellations random registrations through their
        pages (each once), spread over the posting, while workers are killed."""
        base = f"http://127.0.0.1:{self.web_port}"
        rng = random.Random(self.args.seed)
        chosen: set[str] = set()
        # With mail, once the evening is full: a freed seat then goes to a waiting guest ("a seat is yours").
        while self.smtp and self.posted < self.args.capacity and not self.stop_chaos.wait(0.1):
            pass
        while len(chosen) < self.args.cancellations and not self.stop_chaos.is_set():
            time.sleep(rng.uniform(0.05, 0.3))
            with self.lock:
                left = [page for page in self.pages if page not in chosen]
            if not left:
                if self.posted >= self.args.registrations:
                    return  # fewer registrations than cancellations asked
                continue
            page = rng.choice(left)
            chosen.add(page)
            self.door_open.wait()
            with self.lock:
                self.in_flight += 1
            try:
                status: int | str = Guest(base, follow_redirects=False).cancel(page, timeout=30)
            except OSError as error:
                status = type(error).__name__
            with self.lock:
                self.cancel_statuses[status] = self.cancel_statuses.get(status, 0) + 1
                self.in_flight -= 1

    def settle_mail(self, deadline: float) -> dict:
        """Chaos over (the workers' and the senders'), the refusals stop: the
        senders send what is left. The outbox once nothing is waiting or retrying."""
        self.smtp.rules.temporary = 0
        while True:
            outbox = self.outbox()
            unsent = [mail for mail in outbox["mails"] if mail[3] in ("waiting", "retrying")]
            if not unsent or time.monotonic() > deadline:
                return outbox
            self.say(f"{len(unsent)} mails not sent yet")
            time.sleep(1)

    def report_mail(self, outbox: dict) -> bool:
        """Counted at the SMTP server against the facts in the database."""
        rows = {message_id: (kind, pk, state) for message_id, kind, pk, state in outbox["mails"]}
        per = {}  # (registration, kind) -> rows
        for kind, pk, _state in rows.values():
            per[pk, kind] = per.get((pk, kind), 0) + 1
        wrong = []
        for pk, seat, promoted, tickets, email in outbox["registrations"]:
            expected = {
                "ticket": tickets,  # one per ticket issued (a confirmed guest: one; audit says so)
                "seat": 1 if promoted else 0,
                "waiting": 1 if promoted or seat == "waiting" else None,  # None: waited or not (cancelled)
                "cancelled": 1 if seat == "cancelled" else 0,
            }
            for kind, count in expected.items():
                if count is not None and per.get((pk, kind), 0) != count:
                    wrong.append(f"registration {pk}: {per.get((pk, kind), 0)} {kind} mails, expected {count}")
            if not email:
                wrong.append(f"registration {pk} has no address")
        received: dict[str, list] = {}
        for mail in self.smtp.received:
            received.setdefault(mail.message_id, []).append(mail)
        strangers = set(received) - set(rows)
        never = [mid for mid in rows if mid not in received]
        unsent = [mid for mid, (_kind, _pk, state) in rows.items() if state != "sent"]
        duplicates = sum(len(copies) - 1 for copies in received.values())
        # A duplicate comes from the named window: the server took it, the sender died before recording it.
        explained = sum(
            1
            for copies in received.values()
            for first, second in zip(copies, copies[1:], strict=False)
            if any(first.at <= kill <= second.at for kill in self.sender_kills)
        )
        print()
        print("Mail")
        print(f"  mails stored (facts):  {len(rows)} ({self.kinds(rows)})")
        print(f"  mails received:        {len(self.smtp.received)}, distinct Message-IDs {len(received)}")
        print(
            f"  never received:        {len(never)}, not recorded sent: {len(unsent)}, unknown Message-IDs: {len(strangers)}"
        )
        print(f"  duplicates:            {duplicates} (after a sender kill between the copies: {explained})")
        print(
            f"  sender kills:          {len(self.sender_kills)} (SIGKILL); SMTP server restarts: {self.smtp_restarts}"
        )
        print(f"  temporary refusals:    {self.smtp.refused} (451, injected)")
        for line in wrong[:10]:
            print(f"  WRONG: {line}")
        return not wrong and not strangers and not never and not unsent and explained == duplicates

    @staticmethod
    def kinds(rows: dict) -> str:
        counts: dict[str, int] = {}
        for kind, _pk, _state in rows.values():
            counts[kind] = counts.get(kind, 0) + 1
        return ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))

    def totals(self) -> dict[str, int]:
        """status's totals, read as data (`status --json`), not from its human lines."""
        return json.loads(self.manage("status", "--json", "--limit", "0").stdout)["totals"]

    def run(self) -> int:
        self.started = time.monotonic()
        if self.network is None:
            return self.soak()
        with self.network:  # deleted afterwards, whatever happens
            try:
                return self.soak()
            finally:
                for node in self.network.namespaces:
                    self.network.heal(node)
                self.rabbit("stop")

    def soak(self) -> int:
        deadline = self.started + self.args.max_seconds
        n = self.args.registrations
        self.say(
            f"Folder {self.folder}; starting {self.broker}, migrating, starting gunicorn and {len(self.workers)} workers"
        )
        self.rabbit("start")
        self.manage("migrate", "--noinput")
        self.manage("collectstatic", "--noinput")  # DEBUG is off: pages need the hashed static files
        if self.args.capacity:
            self.manage("seats", "--capacity", str(self.args.capacity))
        gunicorn = None
        try:
            with open(self.folder / "gunicorn.log", "w") as web_log:
                gunicorn, _ = start_gunicorn(
                    self.env,
                    *("-c", str(ROOT / "gunicorn.conf.py"), "--workers", "3", "--access-logfile", "/dev/null"),
                    port=self.web_port,
                    ready_path="/",
                    stdout=web_log,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                )
            for index in range(len(self.workers)):
                self.start_worker(index)
            killer = threading.Thread(target=self.chaos, daemon=True)
            killer.start()
            if self.smtp:
                self.smtp.start()
                for index in range(len(self.senders)):
                    self.start_sender(index)
                self.mail_killer = threading.Thread(target=self.mail_chaos, daemon=True)
                self.mail_killer.start()
            chaos_started = time.monotonic()

            names = [f"Chaos Guest {i % 97}" for i in range(n)]  # repeated names: still one ticket each
            clients = [threading.Thread(target=self.post_registrations, args=(names[i::4],)) for i in range(4)]
            for client in clients:
                client.start()
            canceller = threading.Thread(target=self.cancel_some, daemon=True)
            canceller.start()
            # A cluster's faults take longer (finding the leader, a node's restart): start them earlier.
            first_fault = n // 5 if self.cluster else n // 2
            while self.posted < first_fault and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.cluster:
                self.kill_leader()
            elif self.broker == "database":
                self.restart_database()
            else:
                self.say(f"{self.posted} posted; stopping {self.broker}")
                self.rabbit("stop")
                time.sleep(2)
                self.say(f"{self.posted} posted while {self.broker} is down; starting it again")
                self.rabbit("start")
                self.broker_restarts += 1
            if self.network:
                self.partition()
            if self.smtp:
                self.say(f"{self.posted} posted; stopping the SMTP server for 2 s")
                self.smtp.stop()
                time.sleep(2)
                self.smtp.start()
                self.smtp_restarts += 1
            for client in clients:
                client.join(max(1, deadline - time.monotonic()))
            chaos_left = max(3.0, self.args.min_chaos_seconds - (time.monotonic() - chaos_started))
            self.say(
                f"All {self.posted} registrations posted: {self.statuses}; chaos goes on for {chaos_left:.0f} s more"
            )
            time.sleep(chaos_left)
            canceller.join(max(1, deadline - time.monotonic()))  # every cancellation made while workers die
            self.stop_chaos.set()
            killer.join()

            rounds = 0
            while time.monotonic() < deadline:
                totals = self.totals()
                if totals["pending"] == 0:
                    break
                if rounds % 5 == 0:
                    republished = self.manage("reconcile", "--older-than", "0", "--limit", "1000").stdout
                    self.say(f"{totals['pending']} pending; {republished.strip().splitlines()[-1]}")
                rounds += 1
                time.sleep(1)
            audit = self.manage("audit", "--pending-older-than", "0", check=False)
            totals = self.totals()
            outbox = self.settle_mail(deadline) if self.smtp else None
        finally:
            self.stop_chaos.set()
            if self.mail_killer:  # it may be starting a sender in a slot: let it finish, then stop them all
                self.mail_killer.join(30)
            if self.smtp:
                self.smtp.stop()
            for proc in [*self.workers, *self.senders, gunicorn]:
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in [*self.workers, *self.senders, gunicorn]:
                if proc is not None:
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            self.rabbit("stop")
            if self.postgres:
                self.postgres.remove()

        redeliveries = sum(log.read_text().count("redelivered=True") for log in self.worker_logs)
        duration = time.monotonic() - self.started
        cancelled, waiting = totals["cancelled"], totals["waiting"]
        confirmed = n - cancelled - waiting
        expected = min(self.args.capacity, n - cancelled) if self.args.capacity else n - cancelled
        ok = (
            audit.returncode == 0
            and totals["registrations"] == n
            and cancelled == self.cancel_statuses.get(302, 0)
            and confirmed == expected
            and totals["issued"] == confirmed  # one ticket and its key each (audit: no duplicates)
            and (self.args.cancellations or totals["tickets"] == n)
        )
        mail_ok = self.report_mail(outbox) if self.smtp else True
        ok = ok and mail_ok
        print()
        print("Chaos soak summary")
        print(f"  registrations posted: {self.posted} (HTTP results: {self.statuses})")
        print(f"  registrations stored: {totals['registrations']}")
        print(f"  tickets:              {totals['tickets']}")
        if self.args.capacity or self.args.cancellations:
            print(f"  capacity:             {self.args.capacity or 'room for everyone'}")
            print(f"  cancellations:        {cancelled} (HTTP results: {self.cancel_statuses})")
            print(f"  confirmed:            {confirmed} (expected {expected}), waiting: {waiting}")
            print(f"  confirmed with one ticket: {totals['issued']}")
        print(f"  worker kills:         {self.kills} (SIGKILL), restarts: {self.restarts}")
        if self.broker == "database":
            print("  transport:            the database (db://default), no broker")
            print(f"  database restarts:    {self.database_restarts}")
        else:
            print(f"  {self.broker} restarts:    {self.broker_restarts}")
        if self.cluster:
            print(f"  cluster:              {self.cluster} nodes, leader killed (-9) {self.leader_kills} time(s)")
            partitioned = f"{self.partitions} time(s)" if self.network else f"not run: {self.no_partition}"
            print(f"  leader cut off:       {partitioned}")
        print(f"  database:             {self.args.database}")
        print(f"  redeliveries seen:    {redeliveries}")
        print(f"  duration:             {duration:.1f} s")
        print(f"  audit:                {(audit.stdout + audit.stderr).strip()}")
        print(
            f"RESULT: {'PASS' if ok else 'FAIL'}: {totals['tickets']} tickets for {n} registrations"
            + (
                f", {confirmed} confirmed, {cancelled} cancelled"
                if self.args.capacity or self.args.cancellations
                else ""
            )
        )
        if ok and not self.args.keep:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            print(f"Logs kept in {self.folder}")
        return 0 if ok else 1


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registrations", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--transport",
        choices=["amqp", "redis", "database"],
        default="amqp",
        help="RabbitMQ (default), Redis Streams, or the database itself (db://default).",
    )
    parser.add_argument(
        "--cluster", type=int, default=0, help="RabbitMQ only: a cluster of this many nodes; its leader is killed once."
    )
    parser.add_argument(
        "--database", choices=["sqlite", "postgres"], default="sqlite", help="postgres: a throwaway cluster of its own."
    )
    parser.add_argument(
        "--rate", type=float, default=0, help="About this many registrations per second (default: as fast as served)."
    )
    parser.add_argument("--max-seconds", type=float, default=900, help="Give up after this long (default 900).")
    parser.add_argument(
        "--min-chaos-seconds",
        type=float,
        default=30,
        help="Keep killing workers for at least this long, posting or not (default 30).",
    )
    parser.add_argument("--capacity", type=int, default=0, help="Seats for the evening (default: room for everyone).")
    parser.add_argument(
        "--cancellations", type=int, default=0, help="Guests cancel this many random registrations (default none)."
    )
    parser.add_argument("--mail", action="store_true", help="Guests give addresses; mail senders and an SMTP server.")
    parser.add_argument("--seed", type=int, default=None, help="Seed for the choice of victims and delays.")
    parser.add_argument("--keep", action="store_true", help="Keep the folder with logs and database.")
    args = parser.parse_args(argv)
    if args.registrations < 2 or args.workers < 1:
        parser.error("--registrations must be at least 2 and --workers at least 1")
    return args


def main() -> int:
    return Soak(arguments()).run()


if __name__ == "__main__":
    sys.exit(main())
