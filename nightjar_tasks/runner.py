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
Django and never turns a committed (maybe acked) task into a failure; and a
done task's only when heard (attempts.heard: a receiver besides the Tasks
framework's own log line, or that line on), else no TaskResult is built.

Beside it: rows.py reads the task's row (the ORM's get() and in_bulk()
without the query compiler), marks.py writes the completion key and the
done-mark, attempts.py makes one attempt (the time limit, the failure and
its retry or park, the task_finished result)."""

import time
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from nightjar_delivery import checkpoint, record_rejection, sql
from nightjar_tasks import attempts, limits, marks, rows
from nightjar_tasks import backend as backends
from nightjar_tasks.attempts import SENDER
from nightjar_tasks.compat import normalize_json, task_finished, task_started
from nightjar_tasks.models import TaskCompletion, TaskRecord
from nightjar_tasks.rows import Screened, screened

__all__ = ["Screened", "handle", "handle_batch", "screened"]  # what channel.py and the worker use


def handle(message, ack, pause=None):
    """message: a nightjar_tasks.messages.TaskMessage already checked against
    its row; ack(): the delivery is done; pause: the checkpoints.

    Per task: BEGIN; the key claimed and the row read (one statement on
    PostgreSQL); the body; the done-mark sent with the COMMIT (one round
    trip on PostgreSQL: sql.execute_and_commit). A repeat of a done (or
    given-up) task finds its row so, inserts nothing, runs nothing, and is
    acked. Then, on SQLite, the write lock shared with guests
    (limits.LockShare)."""
    began = time.monotonic()
    db = connections[TaskRecord.objects.db]  # the task's database: its transaction, its row
    _handle(message, ack, pause, db)
    if db.vendor == "sqlite":
        limits.lock_share.held_from(began)


def _handle(message, ack, pause, db) -> None:
    checkpoint(pause, "before-write")
    started, me = timezone.now(), attempts.worker_id()
    task = result = None
    done = False
    try:
        with transaction.atomic(using=db.alias):
            record, owned = marks.claim(db, message.task_id)
            if owned:
                task = attempts.imported(record.task_path)
                result = attempts.running(record, task, started, me)
                if result is not None:
                    task_started.send_robust(SENDER, task_result=result)
                value = normalize_json(attempts.call(task, result, record, db.alias))
                sql.refuse_marked_for_rollback(db.alias)  # (a caught database error: nothing would commit)
                checkpoint(pause, "inside-transaction")
                done = marks.mark_done(db, record, value, started)
        if not owned and not record.atomic and record.status not in marks.FINAL:
            # Opted out: the body commits on its own; a crash before the mark repeats it.
            task = attempts.imported(record.task_path)
            result = attempts.running(record, task, started, me)
            if not TaskCompletion.objects.filter(task_id=record.pk).exists():
                if result is not None:
                    task_started.send_robust(SENDER, task_result=result)
                value = normalize_json(attempts.call(task, result, record, db.alias))
                checkpoint(pause, "inside-transaction")
                with transaction.atomic(using=db.alias):
                    done = marks.insert_key(record.pk) and marks.mark_done(db, record, value, started)
    except BaseException as error:
        if task is None and isinstance(error, attempts.CodeGone):
            # Retried like any failure: a release may bring its path back (an old web process's
            # task, or a worker restarted late), within the backend's attempts and backoff.
            attempts.record_failure(record, error.error, started, me)
            checkpoint(pause, "after-commit")
            ack()
            return
        if task is None or not limits.own_failure(error):
            raise  # not the task's failure (its row could not be read or claimed; Ctrl+C)
        failed = attempts.record_failure(record, error, started, me)
        checkpoint(pause, "after-commit")
        ack()
        result = backends.to_result(failed, task)
        task_finished.send_robust(SENDER, task_result=result)  # inside the except: monitors see the traceback
        return
    checkpoint(pause, "after-commit")
    ack()
    if done and (result := attempts.finished(result, record, task)) is not None:
        task_finished.send_robust(SENDER, task_result=result)


def handle_batch(
    messages: list, rejections: list, ack_all, pause=None, stored: dict | None = None, *, channel
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
    records = rows.read_many(
        [message.task_id for message in messages], {pk: s.row for pk, (s, _) in (stored or {}).items()}
    )
    me = attempts.worker_id()
    pending = {}
    for message in messages:  # a task twice in one batch runs once
        record = records[message.task_id]
        if record.status not in marks.FINAL:
            pending[record.pk] = record
    done, results = [], []
    alias = TaskRecord.objects.db
    checkpoint(pause, "before-write")
    began = time.monotonic()
    with transaction.atomic(using=alias):
        for delivery, reason in rejections:
            record_rejection(delivery=delivery, reason=reason, channel=channel)
        owned = marks.insert_keys(list(pending)) if pending else set()
        tasks: dict[str, Any] = {}  # path -> Task, imported once per batch
        each = sql.Savepoint(alias)  # each task's own, one after another
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
                task = tasks.get(path) or tasks.setdefault(path, attempts.imported(path))
            except attempts.CodeGone as gone:
                marks.delete_key(pk)
                attempts.record_failure(record, gone.error, started, me)
                continue
            own = left = None
            if deadline is not None and record.atomic:
                own = attempts.seconds_for(task, record.backend, atomic=True, alias=alias)
                left = deadline - time.monotonic()
                if left <= 0:
                    marks.delete_key(pk)
                    put_back.append(pk)
                    continue
            result = attempts.running(record, task, started, me)
            cut = (
                left is not None and own is not None and left < own
            )  # stopped by the batch's budget, not its own limit
            try:
                with each:
                    if result is not None:
                        task_started.send_robust(SENDER, task_result=result)
                    value = normalize_json(attempts.call(task, result, record, alias, left if cut else None))
            except BaseException as error:
                if not limits.own_failure(error):
                    raise
                marks.delete_key(pk)
                if cut and isinstance(error, limits.TimeLimitExceeded):
                    put_back.append(pk)
                    continue
                failed = attempts.record_failure(record, error, started, me)
                task_finished.send_robust(SENDER, task_result=backends.to_result(failed, task))
                continue
            marks.as_done(record, value, started)
            done.append(record)
            results.append((result, task))
        each.close()
        if put_back:  # READY, never published: reconcile publishes them at its next pass
            TaskRecord.objects.filter(pk__in=put_back).update(published_at=None)
        marks.mark_done_many(done)
        checkpoint(pause, "inside-transaction")
    checkpoint(pause, "after-commit")
    ack_all()
    for record, (result, task) in zip(done, results, strict=True):
        if (result := attempts.finished(result, record, task)) is not None:
            task_finished.send_robust(SENDER, task_result=result)
    if budget is not None:  # (on SQLite)
        limits.lock_share.held_from(began)
    return [record.pk for record in done]
