"""Every state change in Nightjar, as plain functions named after what staff
would say. Views, the admin and management commands all call these; none of
them changes rows on its own. Each guards first (raising NightjarError with a
sentence a person understands), then changes rows in one atomic block, and
publishes only after the commit.
"""

import getpass
import logging
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.management.color import no_style
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from delivery import channel, metrics, recording, transport

# What the worker records (rejections, failures, redeliveries, lost entries,
# its report) and its own delivery limit (recording.park_after_failures) are
# the engine's; the records stay importable from here as before.
from delivery.recording import (  # noqa: F401
    record_failure,
    record_lost_entry,
    record_redeliveries,
    record_rejection,
    report_worker,
)
from tickets import contract
from tickets.models import (
    Completion,
    DeliveryFailure,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    StaffAction,
    Ticket,
    WorkerReport,
)

logger = logging.getLogger(__name__)

DEMO_NAME = "Mina Patel"


class NightjarError(channel.DomainError):
    """A request that cannot be done; str() is the sentence to show a person."""


class UnknownRegistration(NightjarError):
    pass


class SubmissionConflict(NightjarError):
    pass


class RepairRefused(NightjarError):
    pass


def find_registration(*, code: str) -> Registration:
    try:
        registration_id = contract.parse_code(code)
    except contract.ContractError as error:
        raise UnknownRegistration(str(error)) from None
    try:
        return Registration.objects.get(pk=registration_id)
    except Registration.DoesNotExist:
        raise UnknownRegistration(f"There is no registration {contract.format_code(registration_id)}.") from None


def publish_registration(registration: Registration) -> None:
    """Publish one delivery of a registration. Raises transport.BrokerError.
    Never call it inside a transaction: it waits on the network."""
    body = contract.encode(registration_id=registration.pk, name=registration.name)
    # message_id tells publications apart in logs; dedup is by the body's ID.
    message_id = f"{registration.code}/{timezone.now().timestamp():.6f}"
    transport.publish(body, message_id=message_id)


def refuse_ticket_without_key(registration: Registration, what: str) -> None:
    """Guard of every path that publishes an existing registration: one with a
    ticket but no completion key (an unsafe handler's) is not pending; a safe
    handler would find the key new and issue a second ticket."""
    if Registration.objects.filter(has_ticket(), ~has_key(), pk=registration.pk).exists():
        raise NightjarError(
            f"{registration.code} has a ticket without its key; it is not {what}, because a new delivery would "
            f"make a second ticket. `python manage.py repair {registration.code} --apply` adds the key."
        )


def publish_after_commit(registration: Registration) -> None:
    """The registration is already safe in the database, so a failed publish
    is logged and left for reconcile; the guest never sees an error for it."""
    try:
        publish_registration(registration)
    except transport.BrokerError as error:
        metrics.PUBLISHES_FAILED.inc()
        logger.warning("%s stored but not published; reconcile will publish it: %s", registration.code, error)


def register_guest(*, name: str, submission_key: str | None = None) -> Registration:
    """Record a guest's registration (the durable intent) and publish it after commit.

    The same submission key with the same name returns the registration made
    the first time (a re-sent form); with another name it is refused.
    """
    name = contract.clean_name(name)
    try:
        with transaction.atomic():
            registration = Registration.objects.create(name=name, submission_key=submission_key or None)
            transaction.on_commit(lambda: publish_after_commit(registration))
    except IntegrityError:
        # The key is unique: this form was sent before (a double click, a
        # browser retry, or two copies racing). Return what the first made.
        existing = Registration.objects.filter(submission_key=submission_key).first() if submission_key else None
        if existing is None:
            raise
        return _same_submission(existing, name)
    metrics.REGISTRATIONS.inc()
    return registration


def _same_submission(existing: Registration, name: str) -> Registration:
    if existing.name != name:
        raise SubmissionConflict(
            f"This form was already used to register {existing.name} ({existing.code}). "
            "Open the form again to register another guest."
        )
    return existing


def command_line_actor(command: str) -> str:
    """Who ran a management command, as the trace names them."""
    return f"{getpass.getuser()}@{socket.gethostname()} (manage.py {command})"


def record_staff_action(*, actor: str, action: str, registration: Registration | None, detail: str = "") -> None:
    StaffAction.objects.create(actor=actor[:150], action=action, registration=registration, detail=detail[:500])


def retry_registration(*, code: str, actor: str) -> Registration:
    """Publish a new delivery of an existing registration. Safe at any time:
    the worker makes no second ticket for a registration that has one."""
    registration = find_registration(code=code)
    refuse_ticket_without_key(registration, "retried")
    publish_registration(registration)
    record_staff_action(actor=actor, action="retry", registration=registration, detail="Published a new delivery.")
    return registration


@dataclass
class RepairPlan:
    registration: Registration
    keep: Ticket | None
    delete: list[Ticket] = field(default_factory=list)
    completion_exists: bool = True
    applied: bool = False

    def lines(self) -> list[str]:
        code = self.registration.code
        lines = [f"Repair plan for {code} ({self.registration.name}):"]
        if self.keep is None:
            lines.append("  issue the missing ticket (the completion key is there, its ticket was deleted)")
        else:
            lines.append(f"  keep the earliest ticket {self.keep.number} (issued {self.keep.issued:%Y-%m-%d %H:%M:%S})")
        if self.delete:
            lines.append(f"  delete extra tickets: {', '.join(t.number for t in self.delete)}")
        else:
            lines.append("  delete extra tickets: none")
        key = "present" if self.completion_exists else "missing, will be created"
        lines.append(f"  completion key {code}: {key}")
        return lines

    def summary(self) -> str:
        if self.keep is None:
            return "issued the missing ticket"
        deleted = ", ".join(t.number for t in self.delete) or "none"
        return f"kept {self.keep.number}, deleted {deleted}"


def plan_repair(*, code: str) -> RepairPlan:
    """What repair would do to a registration's tickets; changes nothing."""
    return _plan(find_registration(code=code))


def _plan(registration: Registration) -> RepairPlan:
    tickets = list(registration.tickets_in_order())
    completion_exists = Completion.objects.filter(registration=registration).exists()
    if not tickets and not completion_exists:
        raise RepairRefused(
            f"{registration.code} has no ticket yet; there is nothing to repair. Run the worker or retry it."
        )
    for ticket in tickets:
        if ticket.name != registration.name:
            raise RepairRefused(
                f"Ticket {ticket.number} of {registration.code} is for {ticket.name!r}, but the registration "
                f"is for {registration.name!r}; repair will not guess which is right."
            )
    # A key without a ticket (its ticket was deleted): no worker would ever
    # make it again, so repair issues it.
    return RepairPlan(
        registration=registration,
        keep=tickets[0] if tickets else None,
        delete=tickets[1:],
        completion_exists=completion_exists,
    )


def repair_registration(*, code: str, actor: str) -> RepairPlan:
    """Keep the earliest ticket (or issue the missing one), delete the extra
    ones and make sure the completion key exists, all in one transaction with
    its trace."""
    with transaction.atomic():
        # Lock the registration so a worker cannot add a ticket mid-repair.
        registration = find_registration(code=code)
        Registration.objects.select_for_update().filter(pk=registration.pk).exists()
        plan = _plan(registration)
        Ticket.objects.filter(pk__in=[ticket.pk for ticket in plan.delete]).delete()
        if plan.keep is None:
            Ticket.objects.issue(registration_id=registration.pk, name=registration.name)
        Completion.objects.get_or_create(registration=plan.registration)
        record_staff_action(actor=actor, action="repair", registration=registration, detail=plan.summary())
        plan.applied = True
    return plan


def is_parked():
    """True for a registration held for staff (see ParkedDelivery)."""
    return Exists(ParkedDelivery.objects.holding().filter(registration=OuterRef("pk")))


def has_ticket():
    """True for a registration with at least one ticket."""
    return Exists(Ticket.objects.filter(registration=OuterRef("pk")))


def has_key():
    """True for a registration whose completion key is written."""
    return Exists(Completion.objects.filter(registration=OuterRef("pk")))


def parked_without_ticket():
    """The registrations in the state "parked" (a ticket, if one was made after all, wins)."""
    return Registration.objects.filter(is_parked(), ~has_ticket())


def pending_registrations():
    """Registrations that have no ticket and no completion key yet and are not
    parked, oldest first. A ticket without its key is not pending: publishing
    it again would make a second ticket (repair adds the key)."""
    return Registration.objects.filter(~has_ticket(), ~has_key(), ~is_parked()).order_by("created", "id")


@dataclass
class ReconcileReport:
    published: list[str] = field(default_factory=list)
    remaining: int = 0
    passes: int = 0
    collected: "CollectReport | None" = None


RECONCILE_ACTOR = "nightjar (reconcile)"


def reconcile_registrations(
    *,
    limit: int = 100,
    older_than: float = 60,
    catch_up: bool = True,
    max_seconds: float = 300,
    actor: str = RECONCILE_ACTOR,
) -> ReconcileReport:
    """Republish pending registrations older than the grace period, oldest
    first, `limit` per pass. First moves what the broker dead-lettered into the
    database (collect_dead_letters), so a parked registration is never
    republished behind staff's back. With catch_up, passes repeat while each
    one is full, so a backlog drains as fast as the broker confirms (each
    publish waits for its confirm) — bounded by max_seconds. Raises BrokerError
    when the broker stops confirming; what was published stays published, and
    each republish is in the registration's history (one statement per pass)."""
    report = ReconcileReport(collected=collect_dead_letters())
    cutoff = timezone.now() - timedelta(seconds=older_than)
    due = pending_registrations().filter(created__lte=cutoff)
    started = time.monotonic()
    rest = due  # keyset cursor: what comes after the last one published, oldest first
    while True:
        registrations = list(rest[:limit])
        published = []
        try:
            for registration in registrations:
                publish_registration(registration)
                report.published.append(registration.code)
                published.append(registration)
        finally:
            _record_republished(published, actor=actor, older_than=older_than)
        report.passes += 1
        if registrations:
            last = registrations[-1]
            rest = due.filter(Q(created__gt=last.created) | Q(created=last.created, id__gt=last.pk))
        if not catch_up or len(registrations) < limit or time.monotonic() - started > max_seconds:
            break
    report.remaining = rest.count()
    return report


def _record_republished(registrations: list[Registration], *, actor: str, older_than: float) -> None:
    detail = f"Reconcile published it again (no ticket {older_than:g} s after registering)."
    StaffAction.objects.bulk_create(
        StaffAction(actor=actor[:150], action="republish", registration=registration, detail=detail)
        for registration in registrations
    )


@dataclass
class CollectReport:
    parked: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    dropped: int = 0
    rejected: int = 0


# A registration whose delivery limit was used up by interruptions alone (no
# failure recorded: Ctrl+C at a checkpoint, restarted or killed workers) is
# published again this many times before it is parked anyway: a message that
# kills the worker outright records no failure either.
AUTOMATIC_REQUEUES = 1
SYSTEM_ACTOR = "nightjar (dead-letter collector)"


def collect_dead_letters(*, limit: int = 1000) -> CollectReport:
    """Move what the broker dead-lettered into the database, one message at a
    time: record, commit, then ack. A registration with recorded failures is
    parked for staff with the last error as its reason; one whose limit was
    used up by interruptions only is published again (once); a body that
    breaks the contract becomes a RejectedMessage; a registration that has its
    ticket by now needs nothing."""
    report = CollectReport()
    consumer = transport.Consumer()
    try:
        for _ in range(limit):
            delivery = consumer.get(dead=True)
            if delivery is None:
                break
            republish = _collect_one(delivery, report)
            if republish is not None:
                publish_registration(republish)
            consumer.ack(delivery.tag)
    finally:
        consumer.close()
    return report


def _collect_one(delivery: transport.Delivery, report: CollectReport) -> Registration | None:
    """Record one dead letter; return the registration to publish again, if any."""
    try:
        message = contract.decode(delivery.body)
        registration = Registration.objects.filter(pk=message.registration_id).first()
        contract.check_stored(message, registration.name if registration else None)
    except contract.ContractError as error:
        with transaction.atomic():
            record_rejection(delivery=delivery, reason=str(error))
        report.rejected += 1
        return None
    # Done, or a ticket without its key (publishing it again would make a
    # second ticket; audit reports it, repair adds the key): nothing to collect.
    if Registration.objects.filter(Q(has_key()) | Q(has_ticket()), pk=registration.pk).exists():
        report.dropped += 1
        return None
    failure = registration.delivery_failures.first()
    automatic = registration.parked_deliveries.filter(resolved_by=SYSTEM_ACTOR).count()
    with transaction.atomic():
        if failure is None and automatic < AUTOMATIC_REQUEUES:
            reason = f"returned {delivery.attempts} times without a recorded failure (interrupted or restarted workers)"
            _park(registration, delivery, reason, resolution=ParkedDelivery.REQUEUED)
            report.requeued.append(registration.code)
            return registration
        if failure is not None:
            reason = f"{failure.error} (worker {failure.worker}, {failure.at:%Y-%m-%d %H:%M:%S})"
        else:
            reason = f"returned {delivery.attempts} times again without a recorded failure: did the worker die on it?"
        _park(registration, delivery, reason)
        report.parked.append(registration.code)
    return None


def _park(registration, delivery, reason: str, *, resolution: str = "") -> ParkedDelivery:
    return recording.park(
        registration, delivery, reason, resolution=resolution, resolved_by=SYSTEM_ACTOR if resolution else ""
    )


def requeue_parked(*, code: str, actor: str) -> Registration:
    """Staff: publish a parked registration again. It counts as pending again
    (reconcile may pick it up too; the worker makes no second ticket)."""
    registration = find_registration(code=code)
    refuse_ticket_without_key(registration, "requeued")
    with transaction.atomic():
        held = ParkedDelivery.objects.holding().select_for_update().filter(registration=registration)
        if not held.exists():
            raise NightjarError(f"{registration.code} is not parked.")
        held.update(resolution=ParkedDelivery.REQUEUED, resolved_by=actor[:150], resolved_at=timezone.now())
        record_staff_action(
            actor=actor, action="requeue", registration=registration, detail="Requeued a parked delivery."
        )
        transaction.on_commit(lambda: publish_after_commit(registration))
    return registration


def discard_parked(*, code: str, actor: str) -> Registration:
    """Staff: give up on a parked registration. It stays parked (no ticket,
    reconcile leaves it alone) and leaves the list of what waits for staff."""
    registration = find_registration(code=code)
    with transaction.atomic():
        waiting = ParkedDelivery.objects.select_for_update().filter(registration=registration, resolution="")
        if not waiting.exists():
            raise NightjarError(f"{registration.code} has no parked delivery waiting for staff.")
        waiting.update(resolution=ParkedDelivery.DISCARDED, resolved_by=actor[:150], resolved_at=timezone.now())
        record_staff_action(
            actor=actor, action="discard", registration=registration, detail="Discarded a parked delivery."
        )
    return registration


@dataclass
class RegistrationState:
    code: str
    name: str
    state: str
    tickets: int
    completed: bool


def describe_state(*, tickets: int, completed: bool, parked: bool = False) -> str:
    if tickets == 0:
        return "parked" if parked else "key without ticket" if completed else "pending"
    if tickets > 1:
        return "duplicate tickets"
    return "ticket issued" if completed else "ticket without its key"


def registration_states(limit: int | None = None) -> list[RegistrationState]:
    rows = (
        Registration.objects.annotate(
            ticket_count=Count("tickets"),
            completed=has_key(),
            parked=is_parked(),
        )
        .order_by("id")
        .values_list("id", "name", "ticket_count", "completed", "parked")
    )
    if limit is not None:
        rows = rows[:limit]
    return [
        RegistrationState(
            code=contract.format_code(pk),
            name=name,
            state=describe_state(tickets=count, completed=completed, parked=parked),
            tickets=count,
            completed=completed,
        )
        for pk, name, count, completed, parked in rows
    ]


@dataclass
class DeliveryStatus:
    registrations: int
    pending: int
    issued: int  # exactly one ticket and its key: the state "ticket issued"
    duplicates: int
    tickets: int
    rejected: int
    parked: int
    waiting_for_staff: int
    queue: dict | None
    queue_error: str = ""
    broker: str = ""
    without_key: int = 0  # one ticket, no key
    key_only: int = 0  # a key, no ticket, not parked


def delivery_status() -> DeliveryStatus:
    """Totals from the database, one per state (they add up to the
    registrations), and the queue depth from the broker (or why not)."""
    per_registration = Registration.objects.annotate(ticket_count=Count("tickets"))
    one_ticket = per_registration.filter(ticket_count=1)
    try:
        queue, queue_error = transport.queue_counts(), ""
    except transport.BrokerError as error:
        queue, queue_error = None, str(error)
    return DeliveryStatus(
        registrations=Registration.objects.count(),
        pending=pending_registrations().count(),
        issued=one_ticket.filter(has_key()).count(),
        without_key=one_ticket.filter(~has_key()).count(),
        key_only=Registration.objects.filter(has_key(), ~has_ticket(), ~is_parked()).count(),
        duplicates=per_registration.filter(ticket_count__gt=1).count(),
        tickets=Ticket.objects.count(),
        rejected=RejectedMessage.objects.count(),
        parked=parked_without_ticket().count(),
        waiting_for_staff=ParkedDelivery.objects.filter(resolution="").count(),
        queue=queue,
        queue_error=queue_error,
        broker=transport.name(),
    )


def describe_replicas(queue: dict | None) -> str:
    """RabbitMQ's quorum queue on a cluster: its leader and which members are
    online, in one line (empty when the broker did not say)."""
    if not queue or not queue.get("members"):
        return ""
    online = [member for member in queue["members"] if member in queue["online"]]
    offline = [member for member in queue["members"] if member not in queue["online"]]
    line = f"leader {queue['leader'] or 'none'}; {len(online)} of {len(queue['members'])} members online"
    line += f" ({', '.join(online) or 'none'})"
    if offline:
        line += f"; offline: {', '.join(offline)}"
    if len(online) * 2 <= len(queue["members"]):
        line += " — no quorum: publishes wait (left for reconcile) until a majority is back"
    return line


def dependency_health() -> dict[str, str]:
    """ "ok" or "unavailable" for the database and the broker, each within its
    own deadline; the reasons go to the log, never to the caller."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError:
        logger.exception("Health check: the database does not answer")
        checks["database"] = "unavailable"
    try:
        transport.ping()
        checks[transport.name().lower()] = "ok"
    except transport.BrokerError as error:
        logger.warning("Health check: %s", error)
        checks[transport.name().lower()] = "unavailable"
    return checks


def seed_demo() -> tuple[Registration, bool]:
    """Mina Patel, R-0001, with her ticket. Returns (registration, created);
    running it again changes nothing."""
    with transaction.atomic():
        registration, created = Registration.objects.get_or_create(pk=1, defaults={"name": DEMO_NAME})
        if not created and registration.name != DEMO_NAME:
            raise NightjarError(f"R-0001 already belongs to {registration.name}; the demo data was not loaded.")
        if created:
            # An explicit key does not move PostgreSQL's sequence; move it past R-0001.
            with connection.cursor() as cursor:
                for statement in connection.ops.sequence_reset_sql(no_style(), [Registration]):
                    cursor.execute(statement)
            Completion.objects.create(registration=registration)
            Ticket.objects.create(registration=registration, name=registration.name)
    return registration, created


def reset_demo() -> int:
    """Lab only: delete every registration but Mina Patel's (with their
    tickets, keys and records), restart the numbering after R-0001 and T-0001,
    and empty the queues. Returns how many registrations went."""
    others = Registration.objects.exclude(pk=1)
    count = others.count()
    with transaction.atomic():
        for model in (StaffAction, DeliveryFailure, Redelivery, ParkedDelivery, RejectedMessage, Ticket, Completion):
            model.objects.exclude(registration_id=1).delete()
        Ticket.objects.filter(registration_id=1).exclude(
            pk=Ticket.objects.filter(registration_id=1).order_by("pk").values("pk")[:1]
        ).delete()
        others.delete()
        seed_demo()
        _restart_numbering([Registration, Ticket])
    transport.purge_queues()
    return count


def _restart_numbering(models) -> None:
    """The next row gets max(id) + 1, so the lab's outputs (R-0002...) hold again."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for model in models:
                table = model._meta.db_table
                cursor.execute(
                    f"UPDATE sqlite_sequence SET seq = (SELECT COALESCE(MAX(id), 0) FROM {table}) WHERE name = %s",
                    [table],
                )
        else:
            for statement in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(statement)


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    checked: int = 0
    # Not violations: what waits for a person (the promise is kept, not yet fulfilled).
    parked: int = 0
    dead_lettered: int | None = None
    dead_lettered_error: str = ""

    @property
    def passed(self) -> bool:
        return not self.violations


def audit_invariants(*, pending_older_than: float = 300, limit: int = 50) -> AuditReport:
    """Check the promise row by row: one ticket per completed registration,
    keys and tickets in pairs, names that match, nothing pending for long.
    Each kind of violation lists at most `limit` IDs, then a count."""
    report = AuditReport(
        checked=Registration.objects.count(),
        parked=parked_without_ticket().count(),
    )
    try:
        report.dead_lettered = transport.queue_counts()["dead"]
    except transport.BrokerError as error:
        report.dead_lettered_error = str(error)
    per_registration = Registration.objects.annotate(ticket_count=Count("tickets"))

    def add(kind: str, rows) -> None:
        codes = [contract.format_code(pk) for pk in rows.values_list("pk", flat=True)[: limit + 1]]
        if codes:
            more = f" and {rows.count() - limit} more" if len(codes) > limit else ""
            report.violations.append(f"{kind}: {', '.join(codes[:limit])}{more}")

    add("more than one ticket", per_registration.filter(ticket_count__gt=1).order_by("pk"))
    add("completion key without a ticket", per_registration.filter(has_key(), ticket_count=0).order_by("pk"))
    add("ticket without its key", per_registration.filter(~has_key(), ticket_count__gt=0).order_by("pk"))
    mismatched = Registration.objects.filter(
        Exists(Ticket.objects.filter(registration=OuterRef("pk")).exclude(name=OuterRef("name")))
    )
    add("ticket name differs from the registration", mismatched.order_by("pk"))
    cutoff = timezone.now() - timedelta(seconds=pending_older_than)
    add(f"pending for more than {pending_older_than:g} s", pending_registrations().filter(created__lt=cutoff))
    return report


# The operations desk: what workers say about themselves, each registration's
# history, and activity over time from the database's own timestamps.


def worker_counts(*, within: timedelta = timedelta(days=1)) -> dict[str, int]:
    """How many workers seen lately are running, gone or stopped."""
    now = timezone.now()
    recent = WorkerReport.objects.filter(last_seen__gte=now - within)
    fresh = now - timedelta(seconds=settings.NIGHTJAR_WORKER_GONE_SECONDS)
    counts = {
        "stopped": recent.filter(stopped__isnull=False).count(),
        "running": recent.filter(stopped__isnull=True, last_seen__gte=fresh).count(),
        "gone": recent.filter(stopped__isnull=True, last_seen__lt=fresh).count(),
    }
    return {**counts, "total": sum(counts.values())}


def worker_reports(*, within: timedelta = timedelta(days=1), limit: int = 50) -> list[WorkerReport]:
    """Workers seen lately, running ones first; each with .state_now."""
    now = timezone.now()
    rows = list(WorkerReport.objects.filter(last_seen__gte=now - within).order_by("-last_seen")[:limit])
    for row in rows:
        row.state_now = row.state(now, gone_after=settings.NIGHTJAR_WORKER_GONE_SECONDS)
        row.seen_seconds_ago = max(0, round((now - row.last_seen).total_seconds()))
    order = {"running": 0, "gone": 1, "stopped": 2}
    return sorted(rows, key=lambda row: order[row.state_now])


@dataclass
class HistoryEvent:
    at: datetime
    what: str
    detail: str = ""


# Each kind of event shows at most its newest HISTORY_PER_KIND rows: a registration
# redelivered or failed thousands of times must not make its page cost seconds.
HISTORY_PER_KIND = 100


def registration_history(registration: Registration) -> tuple[list[HistoryEvent], str]:
    """Everything that happened to a registration, oldest first (the newest
    HISTORY_PER_KIND of each kind, and a line saying how many were left out),
    and a one-line count of its deliveries, counted in the database."""
    events = [HistoryEvent(registration.created, "registered", registration.name)]
    left_out = 0

    def newest(related):
        nonlocal left_out
        rows = list(related.all()[: HISTORY_PER_KIND + 1])  # the models order newest first
        if len(rows) > HISTORY_PER_KIND:
            rows = rows[:HISTORY_PER_KIND]
            left_out += related.count() - HISTORY_PER_KIND
        return rows

    for action in newest(registration.staff_actions):
        events.append(HistoryEvent(action.at, action.action, f"{action.detail} ({action.actor})"))
    for failure in newest(registration.delivery_failures):
        events.append(HistoryEvent(failure.at, "attempt failed", f"{failure.error} (worker {failure.worker})"))
    for redelivery in newest(registration.redeliveries):
        events.append(
            HistoryEvent(
                redelivery.at, "delivered again", f"delivery {redelivery.delivery}, to worker {redelivery.worker}"
            )
        )
    for parked in newest(registration.parked_deliveries):
        events.append(HistoryEvent(parked.parked, "parked", f"after {parked.attempts} returns: {parked.reason}"))
    for rejected in newest(registration.rejected_messages):
        events.append(HistoryEvent(rejected.received, "delivery rejected", rejected.reason))
    completion = Completion.objects.filter(registration=registration).first()
    if completion is not None:
        events.append(HistoryEvent(completion.completed, "completion key written"))
    for ticket in registration.tickets_in_order()[:HISTORY_PER_KIND]:
        waited = (ticket.issued - registration.created).total_seconds()
        events.append(
            HistoryEvent(ticket.issued, "ticket issued", f"{ticket.number}, {waited:.1f} s after registering")
        )
    events.sort(key=lambda event: event.at)
    if left_out:
        events.insert(
            1,
            HistoryEvent(
                events[1].at if len(events) > 1 else registration.created,
                "not shown",
                f"{left_out} older event(s); the newest {HISTORY_PER_KIND} of each kind are shown",
            ),
        )
    republished = registration.staff_actions.filter(action__in=("republish", "retry", "requeue")).count()
    failed = registration.delivery_failures.count()
    summary = (
        f"Published {1 + republished} time(s) ({republished} republished by reconcile, retry or requeue); "
        f"{registration.redeliveries.count()} redelivery(ies) recorded, {failed} failed attempt(s)."
    )
    return events, summary


@dataclass
class Activity:
    """One chart window: per bucket, registrations and tickets per minute and
    registration → ticket latency (p50, p99, seconds) of the tickets issued in it."""

    start: datetime
    bucket_seconds: int
    registrations: list[float]
    tickets: list[float]
    p50: list[float | None]
    p99: list[float | None]
    read_at: datetime

    @property
    def totals(self) -> tuple[int, int]:
        per_bucket = self.bucket_seconds / 60
        return round(sum(self.registrations) * per_bucket), round(sum(self.tickets) * per_bucket)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return values[min(len(values) - 1, max(0, int(fraction * len(values) + 0.999999) - 1))]


def activity(*, window: timedelta, bucket_seconds: int, now=None) -> Activity:
    """Registrations and tickets per minute and ticket latency over a window,
    from Registration.created and Ticket.issued (first ticket per registration)."""
    now = now or timezone.now()
    count = int(window.total_seconds() // bucket_seconds)
    start = now - timedelta(seconds=count * bucket_seconds)

    def bucket(at) -> int:
        return min(count - 1, int((at - start).total_seconds() // bucket_seconds))

    registrations = [0] * count
    for created in Registration.objects.filter(created__gte=start).values_list("created", flat=True).iterator():
        registrations[bucket(created)] += 1
    tickets = [0] * count
    waits: list[list[float]] = [[] for _ in range(count)]
    issued = Ticket.objects.filter(issued__gte=start).values_list("issued", "registration__created")
    for issued_at, created in issued.iterator():
        index = bucket(issued_at)
        tickets[index] += 1
        waits[index].append(max(0.0, (issued_at - created).total_seconds()))
    per_minute = 60 / bucket_seconds
    for values in waits:
        values.sort()
    return Activity(
        start=start,
        bucket_seconds=bucket_seconds,
        registrations=[n * per_minute for n in registrations],
        tickets=[n * per_minute for n in tickets],
        p50=[percentile(values, 0.50) if values else None for values in waits],
        p99=[percentile(values, 0.99) if values else None for values in waits],
        read_at=now,
    )


def desk_gauges() -> dict:
    """What a metrics scrape reads at that moment: pending and parked
    registrations from the database, queue depth from the broker (None when
    it does not answer within its deadline)."""
    try:
        queue = transport.queue_counts()
    except transport.BrokerError:
        queue = None
    return {
        "pending": pending_registrations().count(),
        "parked": parked_without_ticket().count(),
        "queue": queue,
    }
