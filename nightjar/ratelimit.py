"""A fixed one-minute window per key, counted in the database with one
upsert, so every web process on every machine shares the count (a
per-process cache let 3 gunicorn processes take 357 of 500 scans against a
limit of 120): the guest form's limit per client address, the door's
per staff user, where each scan counts (a sync of N scans costs N), and the
failed sign-ins per address and per username (nightjar/signin.py)."""

import functools
import random
import time

from django.db import connections, transaction

from nightjar.models import RateCount

_TABLE = RateCount._meta.db_table
# A request adds at most one row; one in 50 forgets up to 100 old ones: twice what comes in.
SWEEP_CHANCE = 0.02
SWEPT = 100


def over_limit(key: str, limit: int, *, cost: int = 1) -> bool:
    """Count `cost` more for key this minute; True once the minute's count
    passes limit (0: no limit)."""
    if not limit:
        return False
    return count(key, cost) > limit


@functools.cache
def _statements(alias: str) -> tuple[str, str]:
    """The upsert and the clean-up, quoted for this database once (a guest's POST runs them)."""
    quote = connections[alias].ops.quote_name
    table, key, minute, count_ = (quote(name) for name in (_TABLE, "key", "minute", "count"))
    upsert = (
        f"INSERT INTO {table} ({key}, {minute}, {count_}) VALUES (%s, %s, %s) "
        f"ON CONFLICT ({key}, {minute}) DO UPDATE SET {count_} = {table}.{count_} + excluded.{count_} "
        f"RETURNING {count_}"
    )
    # At most SWEPT of them (any: no ORDER BY, a sweep needs none): a minute of 20,000 client
    # addresses deleted at once held one guest's request and the write lock
    # for ~27 ms on SQLite (issue 43).
    pk = quote(RateCount._meta.pk.column)
    forget = f"DELETE FROM {table} WHERE {pk} IN (SELECT {pk} FROM {table} WHERE {minute} < %s LIMIT {SWEPT})"
    return upsert, forget


def this_minute() -> int:
    return int(time.time() // 60)


def peek(key: str) -> int:
    """Key's count this minute, without adding to it."""
    return RateCount.objects.filter(key=key[:200], minute=this_minute()).values_list("count", flat=True).first() or 0


def count(key: str, cost: int = 1) -> int:
    """Add cost to key's count of this minute and return the new count: one
    statement, atomic under concurrency on SQLite (3.35+) and PostgreSQL."""
    minute = this_minute()
    alias = RateCount.objects.db
    connection = connections[alias]
    upsert, forget = _statements(alias)
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL synchronous_commit = off")  # a lost count after a crash harms nobody
        cursor.execute(upsert, [key[:200], minute, cost])
        (total,) = cursor.fetchone()
        if random.random() < SWEEP_CHANCE:  # now and then, forget some of the minutes that are over
            cursor.execute(forget, [minute - 1])
    return total
