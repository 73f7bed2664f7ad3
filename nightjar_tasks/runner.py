"""The tasks channel's handler: runs one task so that its database writes
happen exactly once.

In ONE transaction: insert the task's completion key (a repeat finds it and
runs nothing), run the task body, mark the row SUCCESSFUL with its return
value, times and worker id. Only after the commit, ack. Killed before or
inside: nothing was written, the broker redelivers. Killed after the commit:
the redelivery finds the key and only acks.

A body that raises (anything: SystemExit and KeyboardInterrupt included,
limits.own_failure) or runs past its time limit (limits.Limit) is rolled
back; then the failure is recorded (traceback,
worker id, attempts) and the task retried after its backoff (reconcile
publishes it when due), or, at its limit, FAILED and parked for staff.

The signals go out with send_robust: a receiver that raises is logged by
Django and never turns a committed (maybe acked) task into a failure."""

import dataclasses
import functools
import json
import operator
import os
import socket
import time
from datetime import timedelta
from typing import NamedTuple

from django.core.signals import setting_changed
from django.db import connections, transaction
from django.db.models import BooleanField, DateTimeField, JSONField
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.dispatch import receiver
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_delivery import sql
from nightjar_delivery.checkpoints import checkpoint
from nightjar_delivery.codec import storable_text
from nightjar_delivery.recording import record_rejection
from nightjar_tasks import backend as backends
from nightjar_tasks import limits
from nightjar_tasks.compat import (
    TaskContext,
    TaskResultStatus,
    get_exception_traceback,
    get_module_path,
    normalize_json,
    task_finished,
    task_started,
)
from nightjar_tasks.models import TaskCompletion, TaskFailure, TaskParked, TaskRecord

SENDER = backends.NightjarBackend
FINAL = (TaskResultStatus.SUCCESSFUL.value, TaskResultStatus.FAILED.value)  # a task in these runs no more


def worker_id() -> str:
    return _worker_id(os.getpid())  # as the engine names its worker


@functools.cache
def _worker_id(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}"


# The hot path's two statements on the task's row, in SQL of our own: the
# ORM's compiling of a get() and an update() cost more than the whole rest
# of a delivery (a profile of `worker --channel tasks`, issue 25). The same
# statements the ORM would send, the values prepared and converted by the
# fields themselves (JSON, datetimes), so nothing differs in what is stored.
_FIELDS = [field for field in TaskRecord._meta.concrete_fields]  # the id first (_rows keys by row[0])
_ATTNAMES = [field.attname for field in _FIELDS]
_PATH, _ENQUEUED, _RUN_AFTER = (
    _FIELDS.index(TaskRecord._meta.get_field(name)) for name in ("task_path", "enqueued_at", "run_after")
)
_DONE_FIELDS = ["status", "started_at", "last_attempted_at", "finished_at", "return_value", "worker_ids"]


@functools.cache
def _statements(vendor: str):
    connection = connections[TaskRecord.objects.db]
    quote, table = connection.ops.quote_name, TaskRecord._meta.db_table
    columns = [field.get_col(table) for field in _FIELDS]
    converters = [
        [sql.loaded]
        if vendor == "sqlite" and sql.plain_datetimes(connection.alias) and isinstance(column.target, DateTimeField)
        # (Django's converter parses the text with a regex: 6 per row, 300 per batch, issue 25)
        else [_json_loaded]
        if type(column.target) is JSONField and column.target.decoder is None
        # (what JSONField.from_db_value does for a column, without its per-value checks)
        else [_boolean]
        if vendor == "sqlite" and type(column.target) is BooleanField
        else [*connection.ops.get_db_converters(column), *column.get_db_converters(connection)]
        for column in columns
    ]
    pk = quote(TaskRecord._meta.pk.column)
    select = f"SELECT {', '.join(quote(f.column) for f in _FIELDS)} FROM {quote(table)} WHERE {pk} = %s"
    done = [TaskRecord._meta.get_field(name) for name in _DONE_FIELDS]
    attempts = quote(TaskRecord._meta.get_field("attempts").column)
    update = (
        f"UPDATE {quote(table)} SET {', '.join(f'{quote(f.column)} = %s' for f in done)}, "
        f"{attempts} = {attempts} + 1 WHERE {pk} = %s"
    )
    return select, list(zip(columns, converters, strict=True)), update, done


_EMPTY = {"[]": list, "{}": dict}


def _json_loaded(value, expression=None, connection=None):
    """A JSONField's value as its from_db_value makes it (no decoder of its own)."""
    if value is None:
        return None
    if type(value) is str and value in _EMPTY:  # (most tasks' kwargs, errors, and a first attempt's worker_ids)
        return _EMPTY[value]()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


@functools.cache
def _converted(vendor: str) -> list:
    """(index, column, converters, one) of the row's columns that have
    converters; one: the chain as one function of the value alone, for the
    kinds the hot path reads most (datetimes on a UTC SQLite, JSON without a
    decoder, SQLite's booleans), or None (then the chain, with the
    connection, as the ORM calls it)."""
    _, columns, _, _ = _statements(vendor)
    return [
        (index, column, converters, converters[0] if len(converters) == 1 and converters[0] in _ONE_ARGUMENT else None)
        for index, (column, converters) in enumerate(columns)
        if converters
    ]


def _boolean(value, expression=None, connection=None):
    """SQLite's convert_booleanfield_value (the column comes back as 0/1, or
    already a bool through Django's registered "bool" converter)."""
    return bool(value) if value in (0, 1) else value


_ONE_ARGUMENT = (sql.loaded, _json_loaded, _boolean)


@functools.cache
def _preparers(alias: str) -> tuple:
    """How _done_values prepares the done fields' values: (one getter of
    them all, one preparer per field), as each field's get_db_prep_save
    does (tests/test_tasks_fast.py compares them), the datetimes as the
    database stores them (SQLite: UTC text; PostgreSQL: as they are) and the
    JSON as the backend adapts it, without the fields' per-value checks."""
    connection = connections[alias]
    _, _, _, fields = _statements(connection.vendor)
    plain, prepare = sql.plain_datetimes(alias), []
    for field in fields:
        if plain and isinstance(field, DateTimeField):
            how = _utc_text if connection.vendor == "sqlite" else None  # (None: the value as it is)
        elif type(field) is JSONField and field.encoder is None:
            how = functools.partial(_json_adapted, adapt=connection.ops.adapt_json_value)
        else:
            how = functools.partial(field.get_db_prep_save, connection=connection)
        prepare.append(how)
    return operator.attrgetter(*(field.attname for field in fields)), prepare


def _utc_text(value):
    return None if value is None else sql.utc_text(value)


def _json_adapted(value, adapt):
    return None if value is None else adapt(value, None)  # (None: SQL NULL, as get_db_prep_save stores it)


def _read(pk: int, connection=None) -> TaskRecord:
    """TaskRecord.objects.get(pk=pk), without the query compiler."""
    connection = connection or connections[TaskRecord.objects.db]
    select, _, _, _ = _statements(connection.vendor)
    rows = sql.execute(select, [pk], using=connection.alias)
    if not rows:
        raise TaskRecord.DoesNotExist(f"No task {pk}")
    return _record(connection, rows[0])


class Screened(NamedTuple):
    """A task's row as the worker's screen read it (TasksChannel.stored):
    its path, which check_stored compares with the message's, when it is
    due (None: now), and the whole row as the database returned it, from
    which a batch builds its record."""

    path: str
    row: tuple
    run_after: object = None


def _rows(pks) -> dict[int, tuple]:
    """The rows of these tasks (_FIELDS, unconverted), by id: one statement
    per 500 ids."""
    connection = connections[TaskRecord.objects.db]
    select, _, _, _ = _statements(connection.vendor)
    ids, rows = sorted(set(pks)), {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join(["%s"] * len(chunk))
        in_chunk = select.removesuffix(" = %s") + f" IN ({marks})"
        rows.update((row[0], row) for row in sql.execute(in_chunk, chunk, using=connection.alias))
    return rows


def screened(pks) -> dict[int, tuple[Screened, float]]:
    """TasksChannel.stored: {id: (Screened, when enqueued, in seconds since
    the epoch)} of the stored tasks among pks."""
    connection = connections[TaskRecord.objects.db]
    _, columns, _, _ = _statements(connection.vendor)
    enqueued, run_after = columns[_ENQUEUED], columns[_RUN_AFTER]
    return {
        pk: (
            Screened(
                row[_PATH],
                row,
                None if row[_RUN_AFTER] is None else _converted_value(connection, row[_RUN_AFTER], *run_after),
            ),
            _converted_value(connection, row[_ENQUEUED], *enqueued).timestamp(),
        )
        for pk, row in _rows(pks).items()
    }


def _converted_value(connection, value, column, converters):
    for converter in converters:
        value = converter(value, column, connection)
    return value


def _read_many(pks: list[int], rows: dict[int, tuple] | None = None) -> dict[int, TaskRecord]:
    """TaskRecord.objects.in_bulk(pks), without the query compiler; the rows
    given (read by the screen) are not read again."""
    connection = connections[TaskRecord.objects.db]
    rows = {pk: rows[pk] for pk in pks if pk in rows} if rows else {}
    rows.update(_rows(pk for pk in pks if pk not in rows))
    plain = _plain_records()
    return {pk: _record(connection, row, plain) for pk, row in rows.items()}


def _record(connection, row, plain: bool = False) -> TaskRecord:
    """The TaskRecord of a row of _FIELDS, each value converted as the ORM
    would; plain (_plain_records() said so): made as Model.from_db makes it,
    without its __init__ (~8 µs a row, issue 25)."""
    values = list(row)
    for index, column, converters, one in _converted(connection.vendor):
        value = values[index]
        values[index] = one(value) if one else _converted_value(connection, value, column, converters)
    if not plain:
        return TaskRecord.from_db(connection.alias, _ATTNAMES, values)
    record = object.__new__(TaskRecord)
    record._state = state = ModelState()
    state.adding, state.db = False, connection.alias
    record.__dict__.update(zip(_ATTNAMES, values, strict=True))
    return record


def _plain_records() -> bool:
    """Whether a TaskRecord is its fields' values and nothing else: no
    receiver of pre_init or post_init would see its __init__ skipped."""
    return not (pre_init.has_listeners(TaskRecord) or post_init.has_listeners(TaskRecord))


@functools.cache
def _claim_statement(vendor: str) -> str:
    """PostgreSQL: the completion key inserted (when the task is to run here)
    and the row read, in ONE statement: one round trip fewer per task."""
    connection = connections[TaskRecord.objects.db]
    quote, table = connection.ops.quote_name, TaskRecord._meta.db_table
    select, _, _, _ = _statements(vendor)
    pk, atomic, status = (quote(TaskRecord._meta.get_field(name).column) for name in ("id", "atomic", "status"))
    key = quote(TaskCompletion._meta.db_table)
    return (
        f"WITH claim AS (INSERT INTO {key} (task_id, completed) "
        f"SELECT {pk}, %s FROM {quote(table)} WHERE {pk} = %s AND {atomic} AND {status} NOT IN (%s, %s) "
        "ON CONFLICT (task_id) DO NOTHING RETURNING task_id) "
        + select.replace(" FROM ", ", EXISTS (SELECT 1 FROM claim) FROM ", 1)
    )


def _claim(connection, pk: int) -> tuple[TaskRecord, bool]:
    """Inside the task's transaction: its row, and whether this transaction
    now holds its completion key (inserted here: the task runs here). Not
    inserted for a task done or given up, for one that opted out of the
    shared transaction, or when the key is there already (a repeat; or
    another worker's, whose commit this waited for)."""
    if connection.vendor != "postgresql":
        record = _read(pk, connection)
        owned = record.atomic and record.status not in FINAL and _insert_key(pk, connection)
        return record, owned
    now = sql.stored_now(connection.alias)
    rows = sql.execute(_claim_statement(connection.vendor), [now, pk, *FINAL, pk], using=connection.alias)
    if not rows:
        raise TaskRecord.DoesNotExist(f"No task {pk}")
    return _record(connection, rows[0][:-1]), rows[0][-1]


_chosen: dict[tuple, float] = {}


@receiver(setting_changed)
def _forget(**kwargs):
    _chosen.clear()


def seconds_for(task, backend: str, *, atomic: bool, alias: str) -> float:
    """The time limit of one attempt of this task: its own (@retry
    time_limit), else its backend's OPTIONS, else limits.DEFAULT_TIME_LIMIT; for an
    atomic task on SQLite at most sqlite_lock_budget (checks.py refuses an
    OPTIONS value above it). Cached: asked once per task on the hot path."""
    key = (task, backend, atomic, alias)
    if key not in _chosen:
        chosen = backends.retry_options(task, backend).get("time_limit") or limits.DEFAULT_TIME_LIMIT
        budget = limits.sqlite_lock_budget(alias) if atomic else None
        _chosen[key] = min(chosen, budget) if budget else chosen
    return _chosen[key]


def _call(task, result, record: TaskRecord, alias: str, seconds: float | None = None):
    """The body, within its time limit (seconds: a shorter one, a batch's rest)."""
    args, kwargs = result.args, result.kwargs
    with limits.Limit(seconds or seconds_for(task, record.backend, atomic=record.atomic, alias=alias)):
        if task.takes_context:
            return task.call(TaskContext(task_result=result), *args, **kwargs)
        return task.call(*args, **kwargs)


def _insert_key(task_id: int, connection=None) -> bool:
    """Insert the completion key; False when it is there already. One
    statement: a concurrent insert of the same key waits for the other
    transaction and then does nothing (PostgreSQL), or waits for the write
    lock (SQLite, immediate transactions), so two workers never both run it."""
    table = TaskCompletion._meta.db_table
    alias = connection.alias if connection else TaskCompletion.objects.db
    inserted = sql.execute(
        f"INSERT INTO {table} (task_id, completed) VALUES (%s, %s) ON CONFLICT (task_id) DO NOTHING RETURNING task_id",
        [task_id, sql.stored_now(alias)],
        using=alias,
    )
    return bool(inserted)


def handle(message, ack, pause=None):
    """message: a nightjar_tasks.messages.TaskMessage already checked against
    its row; ack(): the delivery is done; pause: the checkpoints.

    Per task: BEGIN; the key claimed and the row read (one statement on
    PostgreSQL); the body; the done-mark sent with the COMMIT (one round
    trip on PostgreSQL: sql.execute_and_commit). A repeat of a done (or
    given-up) task finds its row so, inserts nothing, runs nothing, and is
    acked."""
    checkpoint(pause, "before-write")
    started, me = timezone.now(), worker_id()
    task = result = None
    done = False
    db = connections[TaskRecord.objects.db]  # the task's database: its transaction, its row
    try:
        with transaction.atomic(using=db.alias):
            record, owned = _claim(db, message.task_id)
            if owned:
                task, result = _running(record, started, me)
                task_started.send_robust(SENDER, task_result=result)
                value = normalize_json(_call(task, result, record, db.alias))
                sql.refuse_marked_for_rollback(db.alias)  # (a caught database error: nothing would commit)
                checkpoint(pause, "inside-transaction")
                done = _mark_done(db, record, value, started)
        if not owned and not record.atomic and record.status not in FINAL:
            # Opted out: the body commits on its own; a crash before the mark repeats it.
            task, result = _running(record, started, me)
            if not TaskCompletion.objects.filter(task_id=record.pk).exists():
                task_started.send_robust(SENDER, task_result=result)
                value = normalize_json(_call(task, result, record, db.alias))
                checkpoint(pause, "inside-transaction")
                with transaction.atomic(using=db.alias):
                    done = _insert_key(record.pk, db) and _mark_done(db, record, value, started)
    except BaseException as error:
        if task is None and isinstance(error, CodeGone):  # no retry can import it: FAILED at once, with the ImportError
            _record_failure(record, error.__cause__, started, me, final=True)
            checkpoint(pause, "after-commit")
            ack()
            return
        if task is None or not limits.own_failure(error):
            raise  # not the task's failure (its row could not be read or claimed; Ctrl+C)
        failed = _record_failure(record, error, started, me)
        checkpoint(pause, "after-commit")
        ack()
        result = backends.to_result(failed, task)
        task_finished.send_robust(SENDER, task_result=result)  # inside the except: monitors see the traceback
        return
    checkpoint(pause, "after-commit")
    ack()
    if done:
        task_finished.send_robust(SENDER, task_result=_finished(result, record))


class CodeGone(Exception):
    """A stored task's path no longer imports (removed or renamed by a deploy); its __cause__ says why."""


def _imported(path: str):
    try:
        return import_string(path)
    except ImportError as error:
        raise CodeGone(path) from error


def _running(record: TaskRecord, started, me: str):
    """The task object and the TaskResult of the row as running now (the
    row itself is written only by the done-mark or the failure)."""
    task = _imported(record.task_path)
    record.status, record.last_attempted_at = TaskResultStatus.RUNNING, started
    record.started_at = record.started_at or started
    record.worker_ids = [*record.worker_ids, me]
    return task, backends.to_result(record, task)


def _mark_done(connection, record: TaskRecord, value, started) -> bool:
    """The row as done (and `record` as stored, for task_finished): the
    last statement of the task's atomic block, which on PostgreSQL commits
    with it (sql.execute_and_commit)."""
    record.status, record.finished_at, record.return_value = TaskResultStatus.SUCCESSFUL, timezone.now(), value
    record.last_attempted_at, record.attempts = started, record.attempts + 1
    _, _, update, _ = _statements(connection.vendor)
    params = _done_values(connection, record)
    sql.execute_and_commit(update, [*params, record.pk], using=connection.alias)
    return True


def _done_values(connection, record: TaskRecord) -> list:
    """The done-mark's values as the fields prepare them (_preparers): a
    batch prepares 300 of them (a value repeated from the field before, as
    started_at's in last_attempted_at, prepared once)."""
    values, last, prepared = [], (None, None), None
    get, preparers = _preparers(connection.alias)
    for value, prepare in zip(get(record), preparers, strict=True):
        if prepare is None:
            values.append(value)
        elif value is None:
            values.append(prepare(value))
        else:
            if value is not last[0] or prepare is not last[1]:
                last, prepared = (value, prepare), prepare(value)
            values.append(prepared)
    return values


def _record_failure(record: TaskRecord, error: BaseException, started, me: str, *, final: bool = False) -> TaskRecord:
    """After the rollback: note the attempt; retry after the backoff, or at
    the limit (or when final: its code is gone) FAILED and parked (one
    transaction). Returns the row as stored."""
    options = {"max_attempts": 1} if final else backends.retry_options(import_string(record.task_path), record.backend)
    entry = {"exception_class_path": get_module_path(type(error)), "traceback": get_exception_traceback(error)}
    now = timezone.now()
    with transaction.atomic():
        row = TaskRecord.objects.select_for_update().get(pk=record.pk)
        row.attempts += 1
        row.errors = [*row.errors, entry]
        row.worker_ids = [*row.worker_ids, me]
        row.started_at = row.started_at or started
        row.last_attempted_at = started
        tries = row.attempts - row.requeued_at_attempt
        first_line = (str(error).strip().splitlines() or [""])[0]
        TaskFailure.objects.create(
            task=row,
            worker=me[:100],
            error=storable_text(f"{type(error).__name__}: {first_line}", max_bytes=1200)[:300],
        )
        if tries >= options["max_attempts"]:
            row.status, row.finished_at = TaskResultStatus.FAILED, now
            TaskParked.objects.create(
                task=row,
                reason=storable_text(
                    f"{row.task_path} raised {type(error).__name__}: {first_line} (worker {me}); failed {tries} times",
                    max_bytes=1200,
                )[:300],
                attempts=tries,
                body_excerpt=storable_text(row.task_path, max_bytes=2048),
                body_sha256="",
            )
        else:
            row.status = TaskResultStatus.READY
            row.run_after = now + timedelta(seconds=options["backoff"] * 2 ** (tries - 1))
            row.published_at = None  # reconcile publishes it when due
        row.save()
    return row


def _insert_keys(task_ids: list[int]) -> set[int]:
    """Insert the completion keys of the batch in one statement (in chunks of
    500 rows); return the ids whose key was new. Ascending order, so two
    batches sharing tasks lock their keys in the same order (no deadlock)."""
    ids = sorted(set(task_ids))
    table, alias = TaskCompletion._meta.db_table, TaskCompletion.objects.db
    now, new = sql.stored_now(alias), set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = sql.execute(
            f"INSERT INTO {table} (task_id, completed) VALUES {', '.join(['(%s, %s)'] * len(chunk))} "
            "ON CONFLICT (task_id) DO NOTHING RETURNING task_id",
            [value for pk in chunk for value in (pk, now)],
            using=alias,
        )
        new.update(row[0] for row in rows)
    return new


def _delete_key(task_id: int) -> None:
    connection = connections[TaskCompletion.objects.db]
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TaskCompletion._meta.db_table} WHERE task_id = %s", [task_id])


def _mark_done_many(records: list[TaskRecord]) -> None:
    """_mark_done for many rows: one executemany of the same UPDATE (the
    records already carry their done values)."""
    if not records:
        return
    connection = connections[TaskRecord.objects.db]
    _, _, update, _ = _statements(connection.vendor)
    rows = [[*_done_values(connection, record), record.pk] for record in records]
    sql.execute_many(update, rows, using=connection.alias)


@functools.cache
def _result_fields(kind) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(kind))


def _finished(result, record: TaskRecord):
    """The task_finished result of a task done now: its task_started result
    with the done values (no second task.using(), issue 25)."""
    # (Not dataclasses.replace: its args were normalized once already; not copy.copy, which
    # takes ~13 µs through __reduce_ex__ for the backport's slotted dataclass, issue 25.)
    finished = object.__new__(type(result))
    for name in _result_fields(type(result)):
        object.__setattr__(finished, name, getattr(result, name))
    for name, value in (
        ("status", TaskResultStatus.SUCCESSFUL),
        ("finished_at", record.finished_at),
        ("last_attempted_at", record.last_attempted_at),
        ("_return_value", record.return_value),
    ):
        object.__setattr__(finished, name, value)
    return finished


def handle_batch(
    messages: list, rejections: list, ack_all, pause=None, stored: dict | None = None, *, user
) -> list[int]:
    """Batch mode (`worker --channel tasks --batch N`): the batch's promise
    made set-wise. In ONE transaction:

    1. the rejections recorded;
    2. the completion keys of every pending task of the batch inserted in
       ONE statement (`INSERT ... ON CONFLICT DO NOTHING RETURNING`): the ids
       that come back are the tasks this batch owns; the others are repeats
       (done by an earlier commit) and run nothing;
    3. each owned task's body run in a savepoint of its own. A body that
       raises is rolled back to its savepoint (its writes gone, the others'
       kept), its key deleted in the outer transaction, and its failure
       recorded (traceback, attempts, retry or park) as per delivery;
    4. every done row marked in ONE executemany of the done UPDATE;

    then the commit, then one ack for the batch. Killed before the commit:
    nothing of it exists (keys, bodies, marks, failures), the broker
    redelivers the whole batch. Killed after: the redelivery finds the keys
    and the rows done, and only acks.

    Why the keys go in BEFORE the bodies, and not only the keys of the bodies
    that succeeded, after them: the key is the lock that keeps two workers
    from both running one task (a task published twice, or redelivered to
    another worker while this one still runs it). Inserted first, a second
    worker's insert of the same key waits on this transaction (PostgreSQL's
    unique index; SQLite: one writer at a time) and, once this commits, finds
    it and runs nothing; if this rolls back, it runs the task itself. Inserted
    after the bodies, both workers would run the body, and the loser would
    learn it only when its batch's bodies are already released into the outer
    transaction, too late to undo one task's writes alone. The key of a failed
    body is deleted, not kept, so the task's retry (or a duplicate delivery)
    can still run it: exactly what the per-delivery path's rollback does.

    A task that opted out of the shared transaction runs in its savepoint too
    here (the stronger promise). stored: TasksChannel.stored's answer for
    the batch (the rows the screen read: not read again). Returns the ids
    done now."""
    records = _read_many(
        [message.task_id for message in messages], {pk: s.row for pk, (s, _) in (stored or {}).items()}
    )
    me = worker_id()
    pending = {}
    for message in messages:  # a task twice in one batch runs once
        record = records[message.task_id]
        if record.status not in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
            pending[record.pk] = record
    done, finished = [], []
    alias = TaskRecord.objects.db
    checkpoint(pause, "before-write")
    with transaction.atomic(using=alias):
        for delivery, reason in rejections:
            record_rejection(delivery=delivery, reason=reason, user=user)
        owned = _insert_keys(list(pending)) if pending else set()
        tasks, each = {}, sql.Savepoint(alias)  # each task's own, one after another
        # On SQLite the batch's transaction holds the one write lock for all its bodies:
        # together they get one task's budget (limits.sqlite_lock_budget); the tasks the
        # budget does not reach are put back, uncharged, for reconcile to publish again.
        budget = limits.sqlite_lock_budget(alias)
        deadline, put_back = (time.monotonic() + budget if budget else None), []
        for pk, record in pending.items():
            if pk not in owned:
                continue
            path = record.task_path
            started = timezone.now()
            try:
                task = tasks.get(path) or tasks.setdefault(path, _imported(path))
            except CodeGone as gone:
                _delete_key(pk)
                _record_failure(record, gone.__cause__, started, me, final=True)
                continue
            own = left = None
            if deadline is not None and record.atomic:
                own, left = seconds_for(task, record.backend, atomic=True, alias=alias), deadline - time.monotonic()
                if left <= 0:
                    _delete_key(pk)
                    put_back.append(pk)
                    continue
            record.status, record.last_attempted_at = TaskResultStatus.RUNNING, started
            record.started_at = record.started_at or started
            record.worker_ids = [*record.worker_ids, me]
            result = backends.to_result(record, task)
            cut = left is not None and left < own  # stopped by the batch's budget, not its own limit
            try:
                with each:
                    task_started.send_robust(SENDER, task_result=result)
                    value = normalize_json(_call(task, result, record, alias, left if cut else None))
            except BaseException as error:
                if not limits.own_failure(error):
                    raise
                _delete_key(pk)
                if cut and isinstance(error, limits.TimeLimitExceeded):
                    put_back.append(pk)
                    continue
                failed = _record_failure(record, error, started, me)
                task_finished.send_robust(SENDER, task_result=backends.to_result(failed, task))
                continue
            record.status, record.finished_at, record.return_value = TaskResultStatus.SUCCESSFUL, timezone.now(), value
            record.attempts += 1
            done.append(record)
            finished.append(result)
        each.close()
        if put_back:  # READY, never published: reconcile publishes them at its next pass
            TaskRecord.objects.filter(pk__in=put_back).update(published_at=None)
        _mark_done_many(done)
        checkpoint(pause, "inside-transaction")
    checkpoint(pause, "after-commit")
    ack_all()
    for record, result in zip(done, finished, strict=True):
        task_finished.send_robust(SENDER, task_result=_finished(result, record))
    return [record.pk for record in done]
