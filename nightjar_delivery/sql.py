"""Statements run for every delivery, on the DB-API cursor beneath Django's
wrapper: the same connection, the same transaction, Django's exception
classes. The wrapper's own per-call work (the %s to ? rewrite, the error
and debug wrappers, the connection lookups) costs about as much as the
statement itself on SQLite (~35 µs; bin/benchmark.py's worker rows), and
Django's PostgreSQL cursor formats each value into the SQL text in Python.
Used by the channels' hot paths (their completion keys and outcomes, e.g.
nightjar_tasks' runner); everything else goes through the ORM."""

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, Error, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def execute(
    sql: str, params: Sequence[Any], *, using: str = DEFAULT_DB_ALIAS, fetch: bool = True
) -> list[tuple[Any, ...]]:
    """Run one statement (written with %s) and return its rows ([] for one
    that returns none, or with fetch=False: the caller wants none)."""
    db, sql = _ready(using, sql)
    with db.wrap_database_errors:
        cursor = _dbapi_cursor(db)
        try:
            cursor.execute(sql, params)
            return cursor.fetchall() if fetch and _returned_rows(cursor) else []
        finally:
            cursor.close()


def _returned_rows(cursor: Any) -> bool:
    """Whether the statement returned rows (a description with columns),
    without psycopg's making the description: a Column object per column,
    ~2 µs each (a tasks claim's 23 columns: ~45 µs of CPU a task, issue 43)."""
    result = getattr(cursor, "pgresult", None)  # (psycopg's; sqlite3's description is cheap)
    return bool(result.nfields) if result is not None else bool(cursor.description)


def execute_many(sql: str, rows: list[list[Any]], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """One statement (written with %s) for each row of parameters."""
    db, sql = _ready(using, sql)
    with db.wrap_database_errors:
        cursor = _dbapi_cursor(db)
        try:
            cursor.executemany(sql, rows)
        finally:
            cursor.close()


def execute_and_commit(sql: str, params: Sequence[Any], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """The last statement of the outermost transaction.atomic() block, sent
    with the COMMIT in one round trip on PostgreSQL (one psycopg pipeline,
    synced once; the statement's failure aborts the COMMIT and is raised
    here). The block's exit then finds the transaction committed (psycopg's
    commit() does nothing on an idle connection) and runs the on_commit
    callbacks as usual. Elsewhere (SQLite, or inside an outer block) the
    statement alone, and the block's exit commits. (Not a pipeline around
    Django's own commit: that costs two empty syncs, the autocommit switch's
    and the pipeline's exit, for the one round trip it saves; a worker per
    delivery on PostgreSQL, issue 25: 687/s with it, 761/s without, ~800/s
    with this.)"""
    db = connections[using]
    if db.vendor != "postgresql" or len(db.atomic_blocks) != 1 or db.needs_rollback or awaiting_commit(using):
        execute(sql, params, using=using, fetch=False)
        return
    with db.wrap_database_errors, db.connection.pipeline(), _dbapi_cursor(db) as cursor:
        cursor.execute(sql, params)
        cursor.execute("COMMIT")


def before_commit(callback: Callable[[], object], *, using: str = DEFAULT_DB_ALIAS) -> Callable[[], object]:
    """Run callback() inside the next transaction committed on this database
    (this thread's connection), just before its COMMIT: its statements commit
    with the transaction's, or fail it (then it rolls back and raises). A
    callback that returns False waits for the commit after (nothing to join
    yet); a rollback forgets it. Returns the function that forgets it (call
    it once the code that should commit is done, committed or not). The
    database transport's ack joins the handler's own commit with it."""
    db: Any = connections[using]  # patched here: its commit and rollback, and a list Django's wrapper does not declare
    if not hasattr(db, "nightjar_before_commit"):
        db.nightjar_before_commit = []
        commit, rollback = db._commit, db._rollback

        def _commit() -> None:
            _run_before_commit(db)
            return commit()

        def _rollback() -> None:
            db.nightjar_before_commit.clear()
            return rollback()

        db._commit, db._rollback = _commit, _rollback
    db.nightjar_before_commit.append(callback)
    return lambda: callback in db.nightjar_before_commit and db.nightjar_before_commit.remove(callback)


def awaiting_commit(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a before_commit callback waits for this thread's next commit on the database."""
    return bool(getattr(connections[using], "nightjar_before_commit", None))


@contextlib.contextmanager
def commits_of_their_own(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Transactions committed inside (outside any transaction: the worker's own
    bookkeeping while a handler waits at a checkpoint) run no before_commit
    callback: those wait for the commit after, the handler's."""
    db = connections[using]
    waiting = getattr(db, "nightjar_before_commit", None)
    if not waiting:
        yield
        return
    set_aside = list(waiting)
    waiting.clear()
    try:
        yield
    finally:
        waiting[:0] = set_aside


def _run_before_commit(db: Any) -> None:
    callbacks = list(db.nightjar_before_commit)
    for callback in callbacks:
        if callback() is not False:
            db.nightjar_before_commit.remove(callback)


MARKED_FOR_ROLLBACK = (
    "The code run in the transaction (a handler, a task's body) caught a database error, so Django marked"
    " the transaction for rollback: its writes would not be committed. Let the error propagate (a failure, retried), or"
    " run the statement that may fail in a transaction.atomic() block of its own to catch it there."
)


def refuse_marked_for_rollback(using: str = DEFAULT_DB_ALIAS) -> None:
    """Raise TransactionManagementError when a handler returned normally but
    left its transaction marked for rollback (it caught a failed statement's
    error: Model.save() marks it so). Committing would silently drop its
    writes while the outcome says done; the caller treats it as a failure."""
    if connections[using].needs_rollback:
        raise TransactionManagementError(MARKED_FOR_ROLLBACK)


class Savepoint:
    """transaction.atomic() nested in a transaction, as Django's own does it,
    for a batch's bodies, one after another: `each = Savepoint(alias)` once
    per batch, then `with each:` around each body. SAVEPOINT; on an
    exception ROLLBACK TO it and RELEASE it, drop the on_commit callbacks
    registered since (Django's savepoint rollback drops those of its
    savepoint) and clear the rollback mark (the rollback undid what caused
    it); a body that returns leaving the transaction marked for rollback
    raises refuse_marked_for_rollback's error (Django's atomic would roll
    back silently), rolled back as any failure. Django's atomic costs ~35 µs
    a savepoint on SQLite (its cursor per statement, the savepoint
    bookkeeping); a statement through execute() ~10 µs (the connection
    lookup, a cursor of its own); this, the connection looked up and the
    cursor opened once for the batch, ~3 µs. The body's own
    transaction.atomic() blocks nest inside as usual."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS, name: str = "nightjar_body") -> None:
        db = connections[using]
        if not db.in_atomic_block:
            raise TransactionManagementError("sql.Savepoint() is for inside a transaction.atomic() block.")
        self.db, self.callbacks = db, 0
        self.statements = [f"{verb} {name}" for verb in ("SAVEPOINT", "ROLLBACK TO SAVEPOINT", "RELEASE SAVEPOINT")]
        with db.wrap_database_errors:
            self.cursor = _dbapi_cursor(db)

    def _run(self, *statements: str) -> None:
        with self.db.wrap_database_errors:
            for statement in statements:
                self.cursor.execute(statement)

    def __enter__(self) -> None:
        self.callbacks = len(self.db.run_on_commit)
        self._run(self.statements[0])

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        db = self.db
        if kind is None and not db.needs_rollback:
            self._run(self.statements[2])
            return
        try:
            self._run(*self.statements[1:])
        except Error:
            db.needs_rollback = True  # as Django's atomic: the outer transaction is lost, the first error stands
        else:
            db.needs_rollback = False
        del db.run_on_commit[self.callbacks :]
        if kind is None:
            raise TransactionManagementError(MARKED_FOR_ROLLBACK)

    def close(self) -> None:
        self.cursor.close()


def _ready(using: str, sql: str) -> tuple[BaseDatabaseWrapper, str]:
    """Django's connection wrapper of `using` (connected) and the statement in
    its parameter style. (Plain calls, not a context manager around the cursor:
    a generator-based one costs a few µs per statement, three statements per
    delivery.)"""
    db = connections[using]  # one lookup: the `connection` proxy pays one on every attribute
    if db.connection is None:
        db.ensure_connection()
    return db, (sql.replace("%s", "?") if db.vendor == "sqlite" else sql)


def _dbapi_cursor(db: BaseDatabaseWrapper) -> Any:
    """A new DB-API cursor on Django's connection db (already connected)."""
    return server_side_cursor(db.connection) if db.vendor == "postgresql" else db.connection.cursor()


def server_side_cursor(raw: Any) -> Any:
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


def stored(moment: datetime, using: str = DEFAULT_DB_ALIAS) -> datetime | str:
    """A datetime as a plain cursor stores a DateTimeField: Django writes UTC
    (TIME_ZONE is UTC), as text on SQLite; PostgreSQL takes the datetime."""
    return moment if vendor(using) != "sqlite" else utc_text(moment)


def utc_text(moment: datetime) -> str:
    """A datetime as Django stores a DateTimeField on a UTC SQLite: str() of
    the naive UTC datetime."""
    if moment.tzinfo is not UTC:  # (timezone.now()'s is: no conversion)
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(" ")


def stored_now(using: str = DEFAULT_DB_ALIAS) -> datetime | str:
    return stored(timezone.now(), using)


def loaded(value: Any, expression: object = None, connection: object = None) -> Any:
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


# How often (ms) a PostgreSQL backend running one of a worker's statements looks for its client
# (client_connection_check_interval, PostgreSQL 14 and later). A server notices a client gone
# only when it writes to it: a worker killed (or ended past a task's time limit) while a body's
# statement runs left that statement running, with its transaction's locks, until it ended by
# itself — one that never ends, for good.
DEAD_CLIENT_CHECK_MS = 1000


def look_for_a_dead_client(sender: object = None, connection: BaseDatabaseWrapper | None = None, **kwargs: Any) -> None:
    """On a PostgreSQL connection (14+): its statements end within about a
    second of its process (a connection_created receiver)."""
    if connection is None or connection.vendor != "postgresql" or getattr(connection, "pg_version", 0) < 140000:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SET client_connection_check_interval = {DEAD_CLIENT_CHECK_MS}")


def statements_end_with_this_process() -> None:
    """In a worker: every database connection it opens, and those it has,
    asks the server to end its statements when the process is gone."""
    from django.db.backends.signals import connection_created

    connection_created.connect(look_for_a_dead_client, dispatch_uid="nightjar-dead-client")
    for db in connections.all(initialized_only=True):
        if db.connection is not None:
            look_for_a_dead_client(connection=db)
