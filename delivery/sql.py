"""Statements run for every delivery, on the DB-API cursor beneath Django's
wrapper: the same connection, the same transaction, Django's exception
classes. The wrapper's own per-call work (the %s to ? rewrite, the error
and debug wrappers, the connection lookups) costs about as much as the
statement itself on SQLite (~35 µs; bin/benchmark.py's worker rows), and
Django's PostgreSQL cursor formats each value into the SQL text in Python.
Used by the channels' hot paths (tickets' keys and tickets, nightjar_tasks'
runner); everything else goes through the ORM."""

import contextlib
import functools
from datetime import UTC, datetime

from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def execute(sql: str, params: list, *, using: str = DEFAULT_DB_ALIAS, fetch: bool = True) -> list[tuple]:
    """Run one statement (written with %s) and return its rows ([] for one
    that returns none, or with fetch=False: inside a psycopg pipeline a
    statement's rows are not there until the pipeline syncs)."""
    with _cursor(using, sql) as (cursor, sql):
        cursor.execute(sql, params)
        return cursor.fetchall() if fetch and cursor.description else []


def execute_many(sql: str, rows: list[list], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """One statement (written with %s) for each row of parameters."""
    with _cursor(using, sql) as (cursor, sql):
        cursor.executemany(sql, rows)


@contextlib.contextmanager
def _cursor(using: str, sql: str):
    """The DB-API cursor and the statement in its parameter style, inside
    Django's error wrapper."""
    db = connections[using]  # one lookup: the `connection` proxy pays one on every attribute
    if db.connection is None:
        db.ensure_connection()
    if db.vendor == "sqlite":
        sql = sql.replace("%s", "?")
    with db.wrap_database_errors:
        cursor = server_side_cursor(db.connection) if db.vendor == "postgresql" else db.connection.cursor()
        try:
            yield cursor, sql
        finally:
            cursor.close()


def server_side_cursor(raw):
    """psycopg's own cursor: parameters travel apart from the SQL and are
    adapted in C. Django's cursor binds on the client, formatting each value
    into the text in Python — ~2 ms for a batch's 200 values (bin/benchmark.py).
    A statement run 5 times becomes a prepared statement of the connection
    (NIGHTJAR_PREPARED_STATEMENTS, settings.py): planning a 50-row INSERT
    costs about as much as running it (~0.2 ms)."""
    import psycopg

    return psycopg.Cursor(raw)


@functools.cache
def vendor(using: str = DEFAULT_DB_ALIAS) -> str:
    """A database's vendor, looked up once: `connections[...]` costs a few
    µs each time (asgiref Local), and the hot path asks several times per
    delivery. A process never changes its database."""
    return connections[using].vendor


def stored(moment, using: str = DEFAULT_DB_ALIAS):
    """A datetime as a plain cursor stores a DateTimeField: Django writes UTC
    (TIME_ZONE is UTC), as text on SQLite; PostgreSQL takes the datetime."""
    return str(moment.astimezone(UTC).replace(tzinfo=None)) if vendor(using) == "sqlite" else moment


def stored_now(using: str = DEFAULT_DB_ALIAS):
    return stored(timezone.now(), using)


def loaded(value, expression=None, connection=None):
    """A DateTimeField's value as SQLite returns it (UTC text, as stored()
    writes it), as the aware datetime Django's converter makes of it; for
    the hot path's reads (a converter's signature: value, expression,
    connection). Anything else is Django's to parse."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            value = parse_datetime(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@functools.cache
def plain_datetimes(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether stored() and loaded() write and read this database's
    datetimes as Django would: PostgreSQL's always, SQLite's when it keeps
    them in UTC (no TIME_ZONE of its own in DATABASES)."""
    connection = connections[using]
    return connection.vendor == "postgresql" or (connection.vendor == "sqlite" and connection.timezone_name == "UTC")
