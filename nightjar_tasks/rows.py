"""The task's row as the hot path reads it: TaskRecord.objects.get() and
in_bulk() without the query compiler (its compiling of a get() cost more than
the whole rest of a delivery: a profile of `worker --channel tasks`, issue 25).

The statement and its columns' converters are built once per database, the
rows read on nightjar_delivery/sql.py's cursor, each value converted as the
ORM converts it (a few kinds by a one-argument function that does the same
work without the per-value checks) and the records made as Model.from_db
makes them. tests/test_tasks_fast.py compares every field with the ORM's."""

import functools
import json
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, DateTimeField, JSONField
from django.db.models.base import ModelState
from django.db.models.signals import post_init, post_save, pre_init, pre_save

from nightjar_delivery import sql
from nightjar_tasks.models import TaskRecord

FIELDS = TaskRecord._meta.concrete_fields  # a row's columns, in this order: the id first (read_rows keys by row[0])
_ATTNAMES = [field.attname for field in FIELDS]
_PATH, _ENQUEUED, _RUN_AFTER = (
    FIELDS.index(TaskRecord._meta.get_field(name)) for name in ("task_path", "enqueued_at", "run_after")
)


class Select(NamedTuple):
    """The SELECT of one whole row by id (%s), the statement the ORM's get()
    sends, and for each column that has converters (the ORM's, as its
    compiler chains them), by its index: (the column, its converters, one:
    the chain as one function of the value alone, or None: the chain, as the
    ORM calls it)."""

    sql: str
    converters: dict[int, tuple[Any, list[Callable[..., Any]], Callable[..., Any] | None]]


@functools.cache
def select(alias: str) -> Select:
    connection = connections[alias]
    quote, table, pk = connection.ops.quote_name, TaskRecord._meta.db_table, TaskRecord._meta.pk.column
    statement = f"SELECT {', '.join(quote(f.column) for f in FIELDS)} FROM {quote(table)} WHERE {quote(pk)} = %s"
    converters = {}
    for index, column in enumerate(field.get_col(table) for field in FIELDS):
        chain = [*connection.ops.get_db_converters(column), *column.get_db_converters(connection)]
        if chain:
            one = _one_argument(connection, column.target)
            converters[index] = (column, [one] if one else chain, one)
    return Select(statement, converters)


def _one_argument(connection: BaseDatabaseWrapper, field: Any) -> Callable[..., Any] | None:
    """The kinds the hot path reads most, converted without Django's
    per-value work: datetimes on a UTC SQLite (Django's converter parses the
    text with a regex: 6 per row, 300 per batch, issue 25), JSON without a
    decoder (JSONField.from_db_value's checks), SQLite's booleans."""
    sqlite = connection.vendor == "sqlite"
    if sqlite and isinstance(field, DateTimeField) and sql.plain_datetimes(connection.alias):
        return sql.loaded
    if type(field) is JSONField and field.decoder is None:
        return _json_loaded
    if sqlite and type(field) is BooleanField:
        return _boolean
    return None


_EMPTY = {"[]": list, "{}": dict}


def _json_loaded(value: Any, expression: object = None, connection: object = None) -> Any:
    """A JSONField's value as its from_db_value makes it (no decoder of its own)."""
    if value is None:
        return None
    if type(value) is str and value in _EMPTY:  # (most tasks' kwargs, errors, and a first attempt's worker_ids)
        return _EMPTY[value]()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _boolean(value: Any, expression: object = None, connection: object = None) -> Any:
    """SQLite's convert_booleanfield_value (the column comes back as 0/1, or
    already a bool through Django's registered "bool" converter)."""
    return bool(value) if value in (0, 1) else value


def _converted(connection: BaseDatabaseWrapper, value: Any, column: Any, chain: Iterable[Callable[..., Any]]) -> Any:
    for converter in chain:
        value = converter(value, column, connection)
    return value


@functools.cache
def _in(alias: str, count: int) -> str:
    return select(alias).sql.removesuffix(" = %s") + f" IN ({', '.join(['%s'] * count)})"


def read_rows(pks: Iterable[int]) -> dict[int, tuple[Any, ...]]:
    """The rows of these tasks (FIELDS, unconverted), by id: one statement
    per 500 ids."""
    alias = TaskRecord.objects.db
    ids = sorted(set(pks))
    rows: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows.update((row[0], row) for row in sql.execute(_in(alias, len(chunk)), chunk, using=alias))
    return rows


def read(pk: int) -> TaskRecord:
    """TaskRecord.objects.get(pk=pk)."""
    connection = connections[TaskRecord.objects.db]
    found = sql.execute(select(connection.alias).sql, [pk], using=connection.alias)
    if not found:
        raise TaskRecord.DoesNotExist(f"No task {pk}")
    return record(connection, found[0], _plain())


def read_many(pks: list[int], rows: dict[int, tuple[Any, ...]] | None = None) -> dict[int, TaskRecord]:
    """TaskRecord.objects.in_bulk(pks); the rows given (read by the screen)
    are not read again."""
    rows = {pk: rows[pk] for pk in pks if pk in rows} if rows else {}
    rows.update(read_rows(pk for pk in pks if pk not in rows))
    connection, plain = connections[TaskRecord.objects.db], _plain()
    return {pk: record(connection, row, plain) for pk, row in rows.items()}


def _plain() -> bool:
    """Whether a TaskRecord is its fields' values and nothing else: no
    receiver of pre_init or post_init would see its __init__ skipped."""
    return not (pre_init.has_listeners(TaskRecord) or post_init.has_listeners(TaskRecord))


def record(connection: BaseDatabaseWrapper, row: tuple[Any, ...], plain: bool | None = None) -> TaskRecord:
    """The TaskRecord of a row of FIELDS, each value converted as the ORM
    would; plain (_plain() said so; asked when not given): made as
    Model.from_db makes it, without its __init__ (~8 µs a row, issue 25)."""
    values = list(row)
    for index, (column, chain, one) in select(connection.alias).converters.items():
        values[index] = one(values[index]) if one else _converted(connection, values[index], column, chain)
    if not (_plain() if plain is None else plain):
        return TaskRecord.from_db(connection.alias, _ATTNAMES, values)
    made = object.__new__(TaskRecord)
    made._state = state = ModelState()
    state.adding, state.db = False, connection.alias
    made.__dict__.update(zip(_ATTNAMES, values, strict=True))
    return made


class Screened(NamedTuple):
    """A task's row as the worker's screen read it (TasksChannel.stored):
    its path, which check_stored compares with the message's, when it is
    due (None: now), and the whole row as the database returned it, from
    which a batch builds its record."""

    path: str
    row: tuple[Any, ...]
    run_after: object = None


def screened(pks: Iterable[int]) -> dict[int, tuple[Screened, float]]:
    """TasksChannel.stored: {id: (Screened, when enqueued, in seconds since
    the epoch)} of the stored tasks among pks."""
    connection = connections[TaskRecord.objects.db]
    converters = select(connection.alias).converters
    enqueued, run_after = (converters.get(index, (None, ()))[:2] for index in (_ENQUEUED, _RUN_AFTER))
    return {
        pk: (
            Screened(
                row[_PATH],
                row,
                None if row[_RUN_AFTER] is None else _converted(connection, row[_RUN_AFTER], *run_after),
            ),
            _converted(connection, row[_ENQUEUED], *enqueued).timestamp(),
        )
        for pk, row in read_rows(pks).items()
    }


@functools.cache
def _insert(alias: str) -> str:
    quote = connections[alias].ops.quote_name
    marks = ", ".join(["%s"] * len(FIELDS))
    return f"INSERT INTO {quote(TaskRecord._meta.db_table)} ({', '.join(quote(f.column) for f in FIELDS)}) VALUES ({marks})"


def insert(made: TaskRecord) -> None:
    """made.save(force_insert=True), as TaskRecord.objects.create() does, in
    one plain INSERT: the ORM's save() compiles its statement anew on every
    call, ~40% of an enqueue's own time (issue 51). Its id is its own (a
    random default), so nothing is read back. With a pre_save or post_save
    receiver for TaskRecord, save(): they hear every task, as the ORM tells them."""
    alias = router.db_for_write(TaskRecord, instance=made)
    if pre_save.has_listeners(TaskRecord) or post_save.has_listeners(TaskRecord):
        made.save(force_insert=True, using=alias)
        return
    connection = connections[alias]
    values = [field.get_db_prep_save(field.pre_save(made, True), connection) for field in FIELDS]
    sql.execute(_insert(alias), values, using=alias, fetch=False)
    made._state.adding, made._state.db = False, alias
