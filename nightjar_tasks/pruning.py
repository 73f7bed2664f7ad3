"""Pruning finished task results (`nightjar_prune_tasks`): in batches of
primary keys, each batch its own short transaction, so memory stays constant
however large the table, and the write lock (SQLite's only one) is free
between batches for guests' writes.

Why not one queryset.delete(): Django's deletion collector loads every row it
deletes and sends the SET_NULL relations' UPDATE with every id at once: 300,000
old rows on SQLite failed with "too many SQL variables" after 24 s at 792 MB,
nothing deleted (issue 51)."""

import time
from collections.abc import Callable
from datetime import timedelta

from django.db import connections, models, transaction
from django.db.models.signals import post_delete, pre_delete
from django.utils import timezone

from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord

BATCH_SIZE = 1000
# SQLite's busy handler sleeps up to 100 ms between tries and does not queue: a pause
# longer than that between two batches lets a guest's waiting write take the lock.
SQLITE_PAUSE_SECONDS = 0.11


def prune_finished(
    *,
    older_than: timedelta,
    batch_size: int = BATCH_SIZE,
    pause: float | None = None,
    after_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete finished tasks (SUCCESSFUL, or FAILED and no longer waiting
    for staff) that finished before now - older_than: batch_size ids at a
    time in ascending id order (each window found by the primary key's index
    from where the last one ended), each batch one transaction: its rows'
    SET_NULL relations set to NULL, then the rows deleted (their CASCADE
    relations with them), bounded by the batch. pause: seconds between
    batches (None: on SQLite SQLITE_PAUSE_SECONDS, else 0); after_batch(deleted
    so far) is called after each commit. Returns how many were deleted; a
    crash between batches keeps what is done."""
    alias = TaskRecord.objects.db
    if pause is None:
        pause = SQLITE_PAUSE_SECONDS if connections[alias].vendor == "sqlite" else 0
    relations = [relation for relation in TaskRecord._meta.related_objects if not relation.many_to_many]
    set_null = [relation for relation in relations if relation.on_delete is models.SET_NULL]
    cascade = [relation for relation in relations if relation.on_delete is models.CASCADE]
    # Our own DELETE when nothing else would happen: no receiver of the rows' deletion, no
    # relation of another kind (PROTECT, RESTRICT...: the ORM's delete decides those).
    plain = len(set_null) + len(cascade) == len(relations) and not (
        pre_delete.has_listeners(TaskRecord) or post_delete.has_listeners(TaskRecord)
    )
    deleted, after, everything = 0, None, TaskRecord._base_manager.using(alias).order_by("pk")
    while True:
        # The next window of ids by the primary key's index alone (a filter on status would
        # let the planner sort every old row per batch: a million rows, a quadratic crawl).
        following = everything.filter(pk__gt=after) if after is not None else everything
        window = list(following.values_list("pk", flat=True)[:batch_size])
        if not window:
            return deleted
        after = window[-1]
        with transaction.atomic(using=alias):
            ids = _prunable_among(alias, window, timezone.now() - older_than)
            if ids:
                deleted += _delete_batch(alias, ids, set_null, cascade if plain else None)
        if ids:
            if after_batch is not None:
                after_batch(deleted)
            if pause:
                time.sleep(pause)
        if len(window) < batch_size:
            return deleted


def _prunable_among(alias: str, window: list[int], cutoff) -> list[int]:
    """prunable() among these ids, read by the primary key alone and judged
    here: given the status too, SQLite's planner walks the status index
    instead (every old row, for each batch). Locked (PostgreSQL) until the
    batch commits, so a requeue meanwhile is not deleted."""
    rows = TaskRecord._base_manager.using(alias).select_for_update().filter(pk__in=window).order_by()
    finished = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
    ids = [
        pk
        for pk, status, at in rows.values_list("pk", "status", "finished_at")
        if status in finished and at is not None and at < cutoff
    ]
    if not ids:
        return []
    waiting = TaskParked.objects.using(alias).filter(resolution="", task_id__in=ids).order_by()
    return sorted(set(ids) - set(waiting.values_list("task_id", flat=True)))


def _delete_batch(alias: str, ids: list[int], set_null: list, cascade: list | None) -> int:
    """One batch, inside its transaction: the SET_NULL relations unlinked, then
    the rows deleted with their CASCADE relations (cascade None: by the ORM's
    delete, bounded by the batch). Returns the rows deleted."""
    for relation in set_null:
        name = relation.field.name
        relation.related_model._base_manager.using(alias).filter(**{f"{name}__in": ids}).update(**{name: None})
    if cascade is None:
        return TaskRecord._base_manager.using(alias).filter(pk__in=ids).delete()[1].get(TaskRecord._meta.label, 0)
    for relation in cascade:  # (a model no other row points at: one DELETE, no rows loaded)
        name = relation.field.name
        relation.related_model._base_manager.using(alias).filter(**{f"{name}__in": ids}).delete()
    return _delete_rows(alias, ids)


def _delete_rows(alias: str, ids: list[int]) -> int:
    connection = connections[alias]
    quote = connection.ops.quote_name
    statement = (
        f"DELETE FROM {quote(TaskRecord._meta.db_table)} WHERE {quote(TaskRecord._meta.pk.column)} "
        f"IN ({', '.join(['%s'] * len(ids))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, ids)
        return cursor.rowcount
