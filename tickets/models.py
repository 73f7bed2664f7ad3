"""Nightjar's rows. Models hold data and invariants; they never touch RabbitMQ."""

import base64
import functools
import hmac
import secrets

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from nightjar_delivery import (
    AbstractDeliveryFailure,
    AbstractParkedDelivery,
    AbstractRedelivery,
    AbstractRejectedMessage,
    AbstractWorkerReport,
    sql,
)
from tickets.contract import MAX_NAME_CODE_POINTS, format_code


def new_secret() -> str:
    return new_secrets(1)[0]


def new_secrets(count: int) -> list[str]:
    """count secrets of 32 random bytes = 256 bits, URL-safe (unguessable in
    guest URLs), from one read of the OS's random source: a batch's tickets
    take one system call instead of one each."""
    raw = secrets.token_bytes(32 * count)
    return [base64.urlsafe_b64encode(raw[i : i + 32]).rstrip(b"=").decode("ascii") for i in range(0, len(raw), 32)]


@functools.cache
def _insert(model) -> tuple[list, str]:
    """A model's fields but its primary key, and the INSERT ... RETURNING that writes them (made once)."""
    fields = [field for field in model._meta.local_concrete_fields if not field.primary_key]
    columns = ", ".join(f'"{field.column}"' for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    return fields, f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({marks}) RETURNING {model._meta.pk.column}"


def saves_are_heard(model) -> bool:
    """Whether a pre_save or post_save receiver listens for this model: then
    a row goes through save(), so it hears it; else a plain INSERT may. (The
    first test costs an attribute each when nobody listens to either signal
    at all; the per-sender one ~2 µs, once per delivery.)"""
    return bool(pre_save.receivers or post_save.receivers) and (
        pre_save.has_listeners(model) or post_save.has_listeners(model)
    )


class Seat(models.TextChoices):
    """Where a registration stands for a seat (the design's "Seats")."""

    CONFIRMED = "confirmed", "has a seat"  # its ticket is made, or will be (pending)
    WAITING = "waiting", "waiting"  # stored when the evening was full; no delivery until promoted
    CANCELLED = "cancelled", "cancelled"  # gave its seat (or its place) back; any ticket is void


class RegistrationManager(models.Manager):
    def insert(self, registration: "Registration") -> None:
        """Store a new registration (its defaults already made by the model,
        as save() would) with one plain INSERT ... RETURNING id: every
        guest's POST makes one, and the ORM's save() compiles its INSERT
        anew each time (~100 µs of a POST's ~1 ms in-process, issue 43). The
        same row and the same errors (IntegrityError on a used submission key).
        When a pre_save or post_save receiver listens for registrations, save():
        they hear every registration, as the ORM tells them."""
        if saves_are_heard(self.model):
            registration.save(force_insert=True)
            return
        db = connections[DEFAULT_DB_ALIAS]
        fields, statement = _insert(self.model)
        values = [field.get_db_prep_save(field.pre_save(registration, True), db) for field in fields]
        registration.pk = sql.execute(statement, values)[0][0]
        registration._state.adding, registration._state.db = False, DEFAULT_DB_ALIAS

    def stored(self, registration_ids) -> dict[int, tuple[tuple[str, str], float]]:
        """{id: ((stored name, seat), created)} for those that exist, created
        in seconds since the epoch (for the latency metric: a float the
        database computes, where a timestamp read back would cost a Python
        parse per row). One indexed lookup in plain SQL: the worker asks this
        for every delivery or batch, and the contract refuses a delivery of a
        registration without a seat (contract.check_stored).

        The same statement reads the rows' addresses, kept in
        read_addresses until the next call: the ticket's mail
        (mail/outbox.py) takes them there instead of a statement of its own
        per ticket (on PostgreSQL a round trip per delivery)."""
        ids = sorted(set(registration_ids))
        if not ids:
            return {}
        table = self.model._meta.db_table
        if sql.vendor() == "postgresql":
            # One array parameter: PostgreSQL plans an IN list of 50 parameters
            # in ~3 ms, `= ANY(array)` in under 1 (bin/benchmark.py, batch rows).
            rows = sql.execute(
                f"SELECT id, name, seat, email, EXTRACT(EPOCH FROM created)::float8 FROM {table} WHERE id = ANY(%s)",
                [ids],
            )
        else:
            # Django stores UTC text; julianday reads it (to the millisecond).
            marks = ", ".join(["%s"] * len(ids))
            rows = sql.execute(
                f"SELECT id, name, seat, email, (julianday(created) - 2440587.5) * 86400.0 FROM {table}"
                f" WHERE id IN ({marks})",
                ids,
            )
        self.read_addresses = {pk: email for pk, _, _, email, _ in rows}
        return {pk: ((name, seat), created) for pk, name, seat, _, created in rows}

    # {id: address ('' for none)} of the rows the last stored() read, in this process (the worker's).
    read_addresses: dict[int, str] = {}


class Registration(models.Model):
    """The durable intent: a guest asked for a ticket. Written by the web request."""

    name = models.CharField(max_length=MAX_NAME_CODE_POINTS)
    # reconcile walks pending registrations oldest first.
    created = models.DateTimeField(default=timezone.now, db_index=True)
    secret = models.CharField(max_length=64, default=new_secret, editable=False)
    # A re-sent form (double click, browser retry) finds its registration by this key.
    submission_key = models.CharField(max_length=64, null=True, blank=True, unique=True, editable=False)
    # Seats are counted and the waiting list walked by this column (services/seats.py).
    seat = models.CharField(max_length=10, choices=Seat.choices, default=Seat.CONFIRMED, db_index=True)
    # When a waiting guest got a freed seat; audit's grace period runs from here (else from created).
    promoted = models.DateTimeField(null=True, blank=True)
    cancelled = models.DateTimeField(null=True, blank=True)
    # Optional: where the guest's mails go (mail/); empty for no mail.
    email = models.EmailField("e-mail address", blank=True, default="")

    objects = RegistrationManager()

    class Meta:
        ordering = ["id"]
        permissions = [("cancel_registration", "Can cancel a registration (its seat goes to the waiting list)")]

    def __str__(self) -> str:
        return f"{self.code} {self.name}"

    @property
    def code(self) -> str:
        return format_code(self.pk)

    def tickets_in_order(self):
        """Earliest first: the one guests see and the one repair keeps."""
        return self.tickets.order_by("issued", "id")

    def secret_matches(self, candidate: str) -> bool:
        # Constant time, so response timing does not leak the secret.
        return hmac.compare_digest(self.secret.encode(), candidate.encode())


class Evening(models.Model):
    """The evening: one row (pk 1), its capacity. Changed only through
    services/seats.py (the row is the lock every seat decision takes)."""

    # None: room for everyone (the default, and the lab's).
    capacity = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        verbose_name = "evening"

    def __str__(self) -> str:
        return "The evening" + (f" ({self.capacity} seats)" if self.capacity is not None else " (room for everyone)")


class TicketManager(models.Manager):
    def issue(self, *, registration_id: int, name: str) -> None:
        """Store one ticket (what the unsafe handlers and tests make; the
        product issues through tickets/services/tickets.py)."""
        self.issue_many([(registration_id, name)])

    def made_since(self, registration_id: int, since) -> bool:
        """Whether a ticket for this registration was issued at or after `since`."""
        return self.filter(registration_id=registration_id, issued__gte=since).exists()

    def issue_many(self, tickets: list[tuple[int, str]], *, commit: bool = False) -> None:
        """Store tickets for (registration_id, name) pairs: the same rows as
        objects.create(), in one plain INSERT (the worker's, for every
        delivery or batch). When a pre_save or post_save receiver listens for
        tickets, save() for each instead: they hear every ticket, as the ORM
        tells them (as RegistrationManager.insert does). commit: it is the
        last statement of the outermost atomic block, sent with the COMMIT on
        PostgreSQL (sql.execute_and_commit: one round trip fewer per batch).
        The domain's signal is sent by tickets/services/tickets.py."""
        if not tickets:
            return
        if saves_are_heard(self.model):
            for registration_id, name in tickets:
                self.model(registration_id=registration_id, name=name).save(force_insert=True)
            return
        table, now, secrets_ = self.model._meta.db_table, sql.stored_now(), new_secrets(len(tickets))
        if sql.vendor() == "postgresql":
            # Arrays, as in insert_new: three parameters whatever the batch's size.
            statement = (
                f"INSERT INTO {table} (registration_id, name, issued, secret) SELECT pk, name, %s, secret "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS row (pk, name, secret)"
            )
            params = [now, [pk for pk, _ in tickets], [name for _, name in tickets], secrets_]
        else:
            rows = ", ".join(["(%s, %s, %s, %s)"] * len(tickets))
            statement = f"INSERT INTO {table} (registration_id, name, issued, secret) VALUES {rows}"
            params = [v for (pk, name), secret in zip(tickets, secrets_, strict=True) for v in (pk, name, now, secret)]
        if commit:
            sql.execute_and_commit(statement, params)
        else:
            sql.execute(statement, params, fetch=False)


class Ticket(models.Model):
    """What the worker makes. Deliberately NOT unique per registration: the
    unsafe lab handler must be able to make a duplicate, and repair must be
    able to remove it. The Completion key is what keeps the safe path to one."""

    registration = models.ForeignKey(Registration, on_delete=models.PROTECT, related_name="tickets")
    name = models.CharField(max_length=MAX_NAME_CODE_POINTS)
    issued = models.DateTimeField(default=timezone.now)
    secret = models.CharField(max_length=64, default=new_secret, editable=False)

    objects = TicketManager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.number} for {self.registration.code}"

    @property
    def number(self) -> str:
        return f"T-{self.pk:04d}"


class CompletionManager(models.Manager):
    def insert_if_new(self, *, registration_id: int) -> bool:
        """Insert the completion key; True if it was new, False if it was
        already there. A concurrent insert of the same key waits for the other
        transaction and then does nothing, so two workers can never both see
        "new" (see insert_new)."""
        return registration_id in self.insert_new([registration_id])

    def insert_new(self, registration_ids: list[int]) -> set[int]:
        """Insert the keys that are not there yet, in one statement; return
        the IDs that were new. Keys go in ascending order, so two batches that
        share registrations lock them in the same order (no deadlock)."""
        ids = sorted(set(registration_ids))
        if not ids:
            return set()
        table = self.model._meta.db_table
        now = sql.stored_now()
        if sql.vendor() == "postgresql":
            # One array parameter (unnest keeps the ascending order): psycopg parses the text of
            # a statement of more than 50 parameters anew on every call (its cache stops there):
            # ~0.2 ms for a batch's 100 values, ~0.4 ms for its tickets' 200 (issue 43).
            rows, params = "SELECT unnest(%s::bigint[]), %s", [ids, now]
        else:
            rows, params = "VALUES " + ", ".join(["(%s, %s)"] * len(ids)), [v for pk in ids for v in (pk, now)]
        inserted = sql.execute(
            f"INSERT INTO {table} (registration_id, completed) {rows} "
            "ON CONFLICT (registration_id) DO NOTHING RETURNING registration_id",
            params,
        )
        return {row[0] for row in inserted}


class Completion(models.Model):
    """The receipt of idempotency: one row per registration whose ticket was
    made. Its primary key is the registration, so a second insert fails."""

    registration = models.OneToOneField(
        Registration, primary_key=True, on_delete=models.PROTECT, related_name="completion"
    )
    completed = models.DateTimeField(default=timezone.now)

    objects = CompletionManager()

    class Meta:
        ordering = ["registration_id"]

    def __str__(self) -> str:
        return f"completion {format_code(self.registration_id)}"


class RejectedMessage(AbstractRejectedMessage):
    """A delivery that broke the contract or did not match its registration.
    Recorded (and only then acked) so that nothing is silently dropped."""

    # Set when the body names a registration that exists (admin shows it there).
    registration = models.ForeignKey(
        Registration, null=True, blank=True, on_delete=models.SET_NULL, related_name="rejected_messages"
    )


class StaffAction(models.Model):
    """Who changed or republished what, and when: written by the service in
    the same transaction as the change, whether staff used the admin or a
    command (the admin's own history cannot name a shell user)."""

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=40)
    registration = models.ForeignKey(
        Registration, null=True, blank=True, on_delete=models.PROTECT, related_name="staff_actions"
    )
    detail = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor}: {self.action} {self.registration.code if self.registration_id else ''}".strip()


class DeliveryFailure(AbstractDeliveryFailure):
    """One attempt the worker could not finish (the error was logged and the
    delivery handed back). Parking names the last one as its reason."""

    registration = models.ForeignKey(
        Registration, null=True, blank=True, on_delete=models.SET_NULL, related_name="delivery_failures"
    )


class ParkedDelivery(AbstractParkedDelivery):
    """A delivery that used up its delivery limit — the worker counted its
    failures to NIGHTJAR_DELIVERY_LIMIT, or the broker's backstop moved it to
    `<queue>.dead` and reconcile collected it — held in the database for a
    person: requeue or discard. Reconcile leaves a parked registration alone."""

    registration = models.ForeignKey(
        Registration, null=True, blank=True, on_delete=models.PROTECT, related_name="parked_deliveries"
    )

    def __str__(self) -> str:
        code = self.registration.code if self.registration_id else "no registration"
        return f"parked {code}: {self.reason[:60]}"


class Redelivery(AbstractRedelivery):
    """A delivery the broker had sent before (a worker died, failed or was
    stopped with it unacknowledged). Written by the worker for redeliveries
    only, a batch's in one statement: a normal delivery writes nothing here."""

    registration = models.ForeignKey(
        Registration, null=True, blank=True, on_delete=models.SET_NULL, related_name="redeliveries"
    )


class WorkerReport(AbstractWorkerReport):
    """What a running worker says about itself (nightjar_delivery/records.py)."""
