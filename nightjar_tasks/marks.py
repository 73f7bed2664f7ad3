"""The hot path's writes, in SQL of our own: the completion key (the lock
that lets a task run once) and the done-mark of the task's row.

The key: INSERT ... ON CONFLICT DO NOTHING RETURNING, which says which keys
are new (the ORM's bulk_create(ignore_conflicts=True) does not); a
concurrent insert of the same key waits for the other transaction and then
does nothing (PostgreSQL), or waits for the write lock (SQLite, immediate
transactions), so two workers never both run a task.

The done-mark: the UPDATE the ORM's update() would send, without its
compiling (issue 25), its values prepared as the fields prepare them
(tests/test_tasks_fast.py compares them with get_db_prep_save)."""

import functools
import operator
from typing import cast

from django.db import connections
from django.db.models import DateTimeField, Field, JSONField
from django.utils import timezone

from nightjar_delivery import sql
from nightjar_tasks import rows
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskCompletion, TaskRecord

FINAL = (TaskResultStatus.SUCCESSFUL.value, TaskResultStatus.FAILED.value)  # a task in these runs no more
_CONFLICT = "ON CONFLICT (task_id) DO NOTHING RETURNING task_id"
_INSERT = f"INSERT INTO {TaskCompletion._meta.db_table} (task_id, completed)"


def _field(name: str) -> Field:
    """TaskRecord's field of that name: a column (get_field() is typed to answer relations too)."""
    return cast(Field, TaskRecord._meta.get_field(name))


DONE_FIELDS = [
    _field(name) for name in ("status", "started_at", "last_attempted_at", "finished_at", "return_value", "worker_ids")
]


@functools.cache
def _claim_statement(alias: str) -> str:
    """PostgreSQL: the completion key inserted (when the task is to run here)
    and the row read, in ONE statement: one round trip fewer per task."""
    quote = connections[alias].ops.quote_name
    pk, atomic, status = (quote(_field(name).column) for name in ("id", "atomic", "status"))
    return (
        f"WITH claim AS (INSERT INTO {quote(TaskCompletion._meta.db_table)} (task_id, completed) "
        f"SELECT {pk}, %s FROM {quote(TaskRecord._meta.db_table)} "
        f"WHERE {pk} = %s AND {atomic} AND {status} NOT IN (%s, %s) {_CONFLICT}) "
        + rows.select(alias).sql.replace(" FROM ", ", EXISTS (SELECT 1 FROM claim) FROM ", 1)
    )


def claim(connection, pk: int) -> tuple[TaskRecord, bool]:
    """Inside the task's transaction: its row, and whether this transaction
    now holds its completion key (inserted here: the task runs here). Not
    inserted for a task done or given up, for one that opted out of the
    shared transaction, or when the key is there already (a repeat; or
    another worker's, whose commit this waited for)."""
    if connection.vendor != "postgresql":
        record = rows.read(pk)
        return record, record.atomic and record.status not in FINAL and insert_key(pk)
    now = sql.stored_now(connection.alias)
    found = sql.execute(_claim_statement(connection.alias), [now, pk, *FINAL, pk], using=connection.alias)
    if not found:
        raise TaskRecord.DoesNotExist(f"No task {pk}")
    return rows.record(connection, found[0][:-1]), found[0][-1]


def insert_keys(task_ids: list[int]) -> set[int]:
    """Insert the completion keys in one statement (in chunks of 500 rows);
    return the ids whose key was new. Ascending order, so two batches sharing
    tasks lock their keys in the same order (no deadlock). A cancelled task
    has its key already (nightjar_tasks/cancelling.py): it is not new here."""
    ids = sorted(set(task_ids))
    alias = TaskCompletion.objects.db
    now = sql.stored_now(alias)
    new: set[int] = set()
    if connections[alias].vendor == "postgresql":
        # One array parameter (unnest keeps the order): one statement text for any batch,
        # prepared once, where psycopg parses anew each text of over 50 parameters (issue 43).
        rows = sql.execute(f"{_INSERT} SELECT unnest(%s::bigint[]), %s {_CONFLICT}", [ids, now], using=alias)
        return {row[0] for row in rows}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        params = [value for pk in chunk for value in (pk, now)]
        new.update(row[0] for row in sql.execute(_insert(len(chunk)), params, using=alias))
    return new


@functools.cache
def _insert(count: int) -> str:
    return f"{_INSERT} VALUES {', '.join(['(%s, %s)'] * count)} {_CONFLICT}"


def insert_key(task_id: int) -> bool:
    """Insert one completion key; False when it is there already."""
    return bool(insert_keys([task_id]))


def delete_key(task_id: int) -> None:
    """A failed body's key, so its retry (or a duplicate delivery) can run it."""
    TaskCompletion.objects.filter(task_id=task_id).delete()


def as_done(record: TaskRecord, value, started) -> None:
    """`record` as the done-mark stores it (and task_finished reports it)."""
    record.status, record.finished_at, record.return_value = TaskResultStatus.SUCCESSFUL, timezone.now(), value
    record.last_attempted_at, record.attempts = started, record.attempts + 1


@functools.cache
def _update(alias: str) -> str:
    quote = connections[alias].ops.quote_name
    pk, attempts = quote(TaskRecord._meta.pk.column), quote(_field("attempts").column)
    return (
        f"UPDATE {quote(TaskRecord._meta.db_table)} SET {', '.join(f'{quote(f.column)} = %s' for f in DONE_FIELDS)}, "
        f"{attempts} = {attempts} + 1 WHERE {pk} = %s"
    )


def mark_done(connection, record: TaskRecord, value, started) -> bool:
    """The row as done (and `record` as stored, for task_finished): the
    last statement of the task's atomic block, which on PostgreSQL commits
    with it (sql.execute_and_commit)."""
    as_done(record, value, started)
    params = [*done_values(connection, record), record.pk]
    sql.execute_and_commit(_update(connection.alias), params, using=connection.alias)
    return True


def mark_done_many(records: list[TaskRecord]) -> None:
    """mark_done for many rows (already as_done): one executemany of the
    same UPDATE."""
    if not records:
        return
    connection = connections[TaskRecord.objects.db]
    params = [[*done_values(connection, record), record.pk] for record in records]
    sql.execute_many(_update(connection.alias), params, using=connection.alias)


@functools.cache
def _preparers(alias: str) -> tuple:
    """How done_values prepares the done fields' values: (one getter of
    them all, one preparer per field), as each field's get_db_prep_save
    does, the datetimes as the database stores them (SQLite: UTC text;
    PostgreSQL: as they are) and the JSON as the backend adapts it, without
    the fields' per-value checks."""
    connection = connections[alias]
    plain, prepare = sql.plain_datetimes(alias), []
    for field in DONE_FIELDS:
        if plain and isinstance(field, DateTimeField):
            how = _utc_text if connection.vendor == "sqlite" else None  # (None: the value as it is)
        elif type(field) is JSONField and field.encoder is None:
            how = functools.partial(_json_adapted, adapt=connection.ops.adapt_json_value)
        else:
            how = functools.partial(field.get_db_prep_save, connection=connection)
        prepare.append(how)
    return operator.attrgetter(*(field.attname for field in DONE_FIELDS)), prepare


def _utc_text(value):
    return None if value is None else sql.utc_text(value)


def _json_adapted(value, adapt):
    return None if value is None else adapt(value, None)  # (None: SQL NULL, as get_db_prep_save stores it)


def done_values(connection, record: TaskRecord) -> list:
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
