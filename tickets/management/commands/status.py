import json

from django.conf import settings
from django.core.management.base import BaseCommand

from nightjar_delivery import describe_replicas
from tickets.services.status import delivery_status, registration_states
from tickets.services.workers import worker_reports


class Command(BaseCommand):
    help = "Show every registration's state, the totals, and the queue depth. Changes nothing."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=None, help="Show at most this many registrations.")
        parser.add_argument(
            "--json",
            action="store_true",
            help="The same as one JSON object, for scripts (its shape: this command's as_json docstring).",
        )

    def handle(self, *args, **options):
        if options["json"]:
            self.stdout.write(json.dumps(as_json(options["limit"]), indent=2, default=str))
            return
        for row in registration_states(limit=options["limit"]):
            self.stdout.write(f"{row.code}  {row.state:<33} tickets={row.tickets}  {row.name}")
        status = delivery_status()
        self.stdout.write(
            f"Registrations: {status.registrations}  pending: {status.pending}  issued: {status.issued}  "
            f"ticket without its key: {status.without_key}  key without ticket: {status.key_only}  "
            f"duplicate tickets: {status.duplicates}  tickets: {status.tickets}  rejected messages: {status.rejected}"
        )
        self.stdout.write(f"Parked: {status.parked} ({status.waiting_for_staff} waiting for staff: see `parked`)")
        if status.capacity is not None or status.waiting or status.cancelled:
            # Only once seats matter: with room for everyone and nobody cancelled, the guides' output is unchanged.
            self.stdout.write(seats_line(status))
        if status.queue is None:
            self.stdout.write(f"Queue: unknown ({status.queue_error})")
        else:
            q = status.queue
            if q["unacked"] is None:
                unacked = f"unacknowledged unknown ({q['unacked_error']})"
            elif q.get("unacked_lags"):  # RabbitMQ's statistics: seconds old
                unacked = f"{q['unacked']} unacknowledged (by {status.broker}'s statistics, a few seconds old)"
            else:
                unacked = f"{q['unacked']} unacknowledged"
            self.stdout.write(
                f"Queue: {q['ready']} ready, {unacked}, {q['consumers']} consumers, {q['dead']} dead-lettered"
            )
            if "pending_per_consumer" in q:  # Redis Streams: who holds what
                held = ", ".join(f"{name} {count}" for name, count in q["pending_per_consumer"].items()) or "none"
                self.stdout.write(f"Stream: {q['length']} entries; unacknowledged per consumer: {held}")
            if replicas := describe_replicas(q):
                self.stdout.write(f"Replicas: {replicas}")
        workers = worker_reports()
        if workers:
            self.stdout.write(
                f"Workers (last day; one silent for {settings.NIGHTJAR_WORKER_GONE_SECONDS:g} s is gone: killed, "
                "or its machine stopped):"
            )
            for worker in workers:
                self.stdout.write(
                    f"  {worker.name}  {worker.state_now:<8} {worker.mode}  handled={worker.handled} "
                    f"failed={worker.failed}  last seen {worker.seen_seconds_ago} s ago"
                )


def seats_line(status) -> str:
    confirmed = status.registrations - status.waiting - status.cancelled
    room = "room for everyone" if status.capacity is None else f"capacity {status.capacity}"
    free = "" if status.capacity is None else f", {max(0, status.capacity - confirmed)} free"
    return f"Seats: {room}, {confirmed} taken{free}  waiting: {status.waiting}  cancelled: {status.cancelled}"


def as_json(limit: int | None) -> dict:
    """status --json, shape version 1 (new keys may be added; none renamed):
    {"version": 1,
     "registrations": [{"code", "name", "state", "tickets"}...]   (at most --limit),
     "totals": {"registrations", "pending", "issued", "ticket_without_its_key",
                "key_without_ticket", "duplicate_tickets", "tickets", "rejected_messages",
                "parked", "waiting_for_staff", "waiting", "cancelled"},  (integers, as the totals lines)
     "capacity": the evening's seats, or null for room for everyone,
     "broker": "RabbitMQ at amqp://guest:***@...",                 (masked)
     "queue": {"ready", "unacked", "consumers", "dead", ...} or null,  (the broker's counts;
              Redis Streams adds "length" and "pending_per_consumer"; "unacked" may be null)
     "queue_error": "" or why the queue is unknown,
     "workers": [{"name", "state", "mode", "handled", "failed", "seen_seconds_ago"}...]}"""
    status = delivery_status()
    return {
        "version": 1,
        "registrations": [
            {"code": row.code, "name": row.name, "state": row.state, "tickets": row.tickets}
            for row in registration_states(limit=limit)
        ],
        "totals": {
            "registrations": status.registrations,
            "pending": status.pending,
            "issued": status.issued,
            "ticket_without_its_key": status.without_key,
            "key_without_ticket": status.key_only,
            "duplicate_tickets": status.duplicates,
            "tickets": status.tickets,
            "rejected_messages": status.rejected,
            "parked": status.parked,
            "waiting_for_staff": status.waiting_for_staff,
            "waiting": status.waiting,
            "cancelled": status.cancelled,
        },
        "capacity": status.capacity,
        "broker": status.broker,
        "queue": status.queue,
        "queue_error": status.queue_error,
        "workers": [
            {
                "name": worker.name,
                "state": worker.state_now,
                "mode": worker.mode,
                "handled": worker.handled,
                "failed": worker.failed,
                "seen_seconds_ago": worker.seen_seconds_ago,
            }
            for worker in worker_reports()
        ],
    }
