"""The Django Tasks backend's pure parts on the in-memory transport, the
worker loop in this process. Nothing here proves a delivery guarantee: each
is proven with real brokers and killed worker processes in
tests/test_tasks_broker.py."""

import io
import logging
import signal as signals
from datetime import UTC, timedelta

import django
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_init, pre_save
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from nightjar_delivery import channel, sql, transport
from nightjar_delivery import reconcile as engine
from nightjar_delivery.worker import Worker
from nightjar_tasks import attempts, compat, marks, messages, publishing, rows, runner
from nightjar_tasks import backend as backends
from nightjar_tasks.backend import NightjarBackend, to_result
from nightjar_tasks.channel import TasksChannel
from nightjar_tasks.compat import (
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
    task_finished,
    task_started,
    tasks_logger,
)
from nightjar_tasks.models import TaskCompletion, TaskFailure, TaskParked, TaskRecord, TaskRejectedMessage
from tests import task_functions as tasks

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def tasks_channel(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"
    chosen = channel.select("tasks")
    yield chosen
    channel.select(None)


def ready(queue) -> int:
    return transport.queue_counts(queue)["ready"]


def drain(batch: int | None = None) -> str:
    out = io.StringIO()
    worker = Worker(handler=runner.handle, stdout=out, batch=batch)
    worker.connect()
    try:
        worker.drain()
    finally:
        worker.close()
    return out.getvalue()


def reconcile():
    return engine.reconcile(channel.current(), limit=100, older_than=60, actor="test")


def test_enqueue_in_a_rolled_back_transaction_stores_and_publishes_nothing(tasks_channel):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.insert_row.enqueue("never")
        raise RuntimeError("the caller changed its mind")
    assert TaskRecord.objects.count() == 0
    assert ready(tasks_channel.queue) == 0


def test_enqueue_publishes_after_commit_and_the_worker_stores_the_result(tasks_channel):
    with transaction.atomic():
        result = tasks.insert_row.enqueue("one")
        assert ready(tasks_channel.queue) == 0  # not before the commit
    assert ready(tasks_channel.queue) == 1
    assert result.status == TaskResultStatus.READY
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "one"
    assert result.worker_ids and result.started_at and result.finished_at
    assert list(Group.objects.values_list("name", flat=True)) == ["one"]

    # A repeat of the done task (a republish) runs nothing and is acked.
    publishing.publish(TaskRecord.objects.get())
    drain()
    assert Group.objects.count() == 1
    assert ready(tasks_channel.queue) == 0
    assert TaskRecord.objects.get().attempts == 1


def test_get_result_reads_the_row_and_unknown_ids_do_not_exist():
    result = tasks.add.enqueue(2, 3)
    backend = tasks.add.get_backend()
    assert isinstance(backend, NightjarBackend)
    assert backend.get_result(result.id).status == TaskResultStatus.READY
    drain()
    assert tasks.add.get_result(result.id).return_value == 5
    # async_to_sync: aget_result's query runs back on this thread (its connection, closed by the test run).
    assert async_to_sync(backend.aget_result)(result.id).return_value == 5
    for unknown in ("999999", "not-a-number"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(unknown)


def test_a_body_that_is_not_a_task_message_is_a_rejected_record(tasks_channel):
    transport.publish_raw(
        [b'{"task": "x"}', messages.encode(424242, "tests.task_functions.add")], queue=tasks_channel.queue
    )
    drain()
    assert TaskRejectedMessage.objects.count() == 2
    assert ready(tasks_channel.queue) == 0


def test_a_failing_task_is_retried_then_failed_and_parked_then_requeued_by_staff(tasks_channel):
    result = tasks.insert_when_fixed.enqueue("late")
    drain()
    row = TaskRecord.objects.get()
    assert (row.status, row.attempts, row.published_at) == (TaskResultStatus.READY, 1, None)  # waits for its retry
    assert reconcile().published == [f"task {row.pk}"]  # backoff 0: due at once
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2 and "is not fixed yet" in result.errors[-1].traceback
    assert result.errors[-1].exception_class_path == "builtins.RuntimeError"
    assert TaskFailure.objects.count() == 2
    assert Group.objects.count() == 0  # every failed attempt rolled back
    assert len(engine.parked_lines(channel.current())) == 1
    assert reconcile().published == []  # parked: reconcile leaves it alone

    Group.objects.create(name="fixed-late")
    engine.requeue_parked(channel.current(), TaskRecord.objects.get(pk=result.id), actor="staff")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "late"
    assert TaskParked.objects.get().resolution == TaskParked.REQUEUED


def test_run_after_is_not_published_until_due():
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    assert reconcile().published == []
    drain()
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    TaskRecord.objects.update(run_after=timezone.now() - timedelta(seconds=1))
    assert reconcile().published == [f"task {result.id}"]
    drain()
    assert tasks.add.get_result(result.id).return_value == 2


def test_enqueue_returns_when_the_broker_refuses_and_reconcile_publishes_later(monkeypatch, tasks_channel):
    def refuse(*args, **kwargs):
        raise transport.BrokerError("the broker is down")

    monkeypatch.setattr(transport, "publish", refuse)
    result = tasks.add.enqueue(4, 4)
    monkeypatch.undo()
    assert ready(tasks_channel.queue) == 0
    assert reconcile().published == []  # within the grace period
    TaskRecord.objects.update(published_at=timezone.now() - timedelta(minutes=5))
    assert reconcile().published == [f"task {result.id}"]
    drain()
    assert tasks.add.get_result(result.id).return_value == 8


def test_the_three_signals_and_task_finished_inside_the_except():
    seen = []

    def note(signal_name):
        def receiver(sender, task_result, **kwargs):
            import sys

            seen.append((signal_name, task_result.status, sys.exc_info()[0]))

        return receiver

    receivers = [(task_enqueued, note("enqueued")), (task_started, note("started")), (task_finished, note("finished"))]
    for signal, receiver in receivers:
        signal.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        drain()
        tasks.insert_when_fixed.enqueue("never")
        drain()
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)
    assert seen[:3] == [
        ("enqueued", TaskResultStatus.READY, None),
        ("started", TaskResultStatus.RUNNING, None),
        ("finished", TaskResultStatus.SUCCESSFUL, None),
    ]
    assert seen[-1] == ("finished", TaskResultStatus.READY, RuntimeError)  # failed, to be retried


@pytest.mark.parametrize("batch", [None, 10])
def test_no_task_result_is_built_when_only_the_frameworks_log_line_listens_and_it_is_off(monkeypatch, caplog, batch):
    # (issue 43: to_result, the two sends and finished() were ~12 µs of a batch's ~65 µs a task)
    tasks.add.enqueue(1, 2), tasks.insert_row.enqueue("quiet")
    built = []
    monkeypatch.setattr(backends, "to_result", lambda *args: built.append(args) or to_result(*args))
    # (Off with settings.py's root logger at WARNING on Django 5.2; Django 6's own LOGGING puts "django" at INFO.)
    caplog.set_level(logging.WARNING, logger=tasks_logger.name)
    drain(batch=batch)
    assert built == []
    assert sorted(TaskRecord.objects.values_list("status", "return_value"), key=str) == [
        (TaskResultStatus.SUCCESSFUL, "quiet"),
        (TaskResultStatus.SUCCESSFUL, 3),
    ]


@pytest.mark.parametrize("batch", [None, 10])
def test_a_body_that_takes_its_context_gets_its_task_result_when_no_signal_is_heard(caplog, batch):
    caplog.set_level(logging.WARNING, logger=tasks_logger.name)
    result = tasks.own_result.enqueue("mine")
    drain(batch=batch)
    result.refresh()
    assert result.return_value == ["mine", result.id, TaskResultStatus.RUNNING, 1, ["mine"]]


@pytest.mark.parametrize("batch", [None, 10])
def test_the_frameworks_log_lines_are_written_when_its_logger_is_on(caplog, batch):
    result = tasks.add.enqueue(1, 2)
    caplog.set_level(logging.INFO, logger=tasks_logger.name)
    drain(batch=batch)
    lines = [record.getMessage() for record in caplog.records if record.name == tasks_logger.name]
    assert lines == [
        f"Task id={result.id} path={tasks.add.module_path} state={TaskResultStatus.RUNNING}",
        f"Task id={result.id} path={tasks.add.module_path} state={TaskResultStatus.SUCCESSFUL}",
    ]


def test_a_receiver_connected_during_the_body_hears_task_finished_with_the_done_row(caplog):
    result = tasks.add.enqueue(2, 5)
    caplog.set_level(logging.WARNING, logger=tasks_logger.name)
    assert not (attempts.heard(task_started) or attempts.heard(task_finished))
    record = TaskRecord.objects.get()
    task = attempts.imported(record.task_path)
    assert attempts.running(record, task, timezone.now(), "me") is None  # no one would see it
    assert attempts.finished(None, record, task) is None
    seen = []
    receiver = lambda sender, task_result, **kwargs: seen.append(task_result)  # noqa: E731
    task_finished.connect(receiver)
    try:
        assert attempts.heard(task_finished) and not attempts.heard(task_started)
        marks.as_done(record, 7, record.started_at)
        done = attempts.finished(None, record, task)
    finally:
        task_finished.disconnect(receiver)
    assert (done.id, done.status, done.return_value, done.worker_ids) == (result.id, "SUCCESSFUL", 7, ["me"])


def test_a_task_that_opts_out_says_so_in_its_row():
    tasks.insert_row_outside.enqueue("outside")
    drain()
    assert TaskRecord.objects.get().atomic is False
    assert Group.objects.filter(name="outside").count() == 1


def test_the_backend_checks_its_options(settings):
    backend = NightjarBackend("bad", {"OPTIONS": {"max_attempts": 0, "backoff": -1}, "QUEUES": ["no spaces"]})
    assert [problem.id for problem in backend.check()] == [
        "nightjar_tasks.E003",
        "nightjar_tasks.E004",
        "nightjar_tasks.E005",
    ]
    assert list(NightjarBackend("good", {}).check()) == []


def test_on_sqlite_a_time_limit_a_guest_cannot_outwait_is_refused():
    # SQLite's busy timeout is 20 s (nightjar/settings.py): an atomic task may hold the lock 10; PostgreSQL locks rows.
    refused = NightjarBackend("long", {"OPTIONS": {"time_limit": 60}})
    expected = ["nightjar_tasks.E007"] if connection.vendor == "sqlite" else []
    assert [problem.id for problem in refused.check()] == expected
    assert [problem.id for problem in NightjarBackend("junk", {"OPTIONS": {"time_limit": "1"}}).check()] == [
        "nightjar_tasks.E006"
    ]
    assert list(NightjarBackend("short", {"OPTIONS": {"time_limit": 10}}).check()) == []


def test_prune_deletes_finished_results_older_than_the_days(capsys):
    old = tasks.add.enqueue(1, 1)
    drain()
    tasks.add.enqueue(2, 2)
    TaskRecord.objects.filter(pk=old.id).update(finished_at=timezone.now() - timedelta(days=40))
    call_command("nightjar_prune_tasks", "--days", "30")
    assert list(TaskRecord.objects.values_list("status", flat=True)) == [TaskResultStatus.READY]
    assert "Deleted 1" in capsys.readouterr().out


def test_batch_mode_runs_each_task_in_its_own_savepoint(tasks_channel):
    good = tasks.insert_row.enqueue("batched")
    bad = tasks.insert_when_fixed.enqueue("broken")
    publishing.publish(TaskRecord.objects.get(pk=good.id))  # a repeat in the same batch
    transport.publish_raw([b"not json"], queue=tasks_channel.queue)
    drain(batch=10)
    good.refresh(), bad.refresh()
    assert (good.status, good.return_value) == (TaskResultStatus.SUCCESSFUL, "batched")
    assert (bad.status, bad.attempts) == (TaskResultStatus.READY, 1)  # rolled back alone, waits for its retry
    assert list(Group.objects.values_list("name", flat=True)) == ["batched"]
    assert TaskRejectedMessage.objects.count() == 1
    assert ready(tasks_channel.queue) == 0


def test_a_batch_with_a_failing_task_in_the_middle_rolls_back_only_that_task(tasks_channel):
    first = tasks.insert_row.enqueue("first")
    bad = tasks.insert_when_fixed.enqueue("middle")
    last = tasks.insert_row.enqueue("last")
    seen = []

    def note(sender, task_result, **kwargs):
        done = task_result.status == TaskResultStatus.SUCCESSFUL
        seen.append((task_result.id, task_result.status, task_result.return_value if done else None))

    task_finished.connect(note)
    try:
        drain(batch=10)
    finally:
        task_finished.disconnect(note)
    for result in (first, bad, last):
        result.refresh()
    assert [(r.status, r.attempts) for r in (first, last)] == [(TaskResultStatus.SUCCESSFUL, 1)] * 2
    assert (bad.status, bad.attempts, len(bad.errors)) == (TaskResultStatus.READY, 1, 1)  # its failure recorded
    assert TaskFailure.objects.filter(task_id=bad.id).count() == 1
    assert sorted(Group.objects.values_list("name", flat=True)) == ["first", "last"]  # "attempt-middle" rolled back
    assert sorted(TaskCompletion.objects.values_list("task_id", flat=True)) == sorted([int(first.id), int(last.id)])
    assert sorted(seen) == sorted(
        [
            (first.id, TaskResultStatus.SUCCESSFUL, "first"),
            (bad.id, TaskResultStatus.READY, None),
            (last.id, TaskResultStatus.SUCCESSFUL, "last"),
        ]
    )
    Group.objects.create(name="fixed-middle")
    reconcile()  # its retry (backoff 0) is due: its key was deleted, so it runs
    drain(batch=10)
    bad.refresh()
    assert (bad.status, bad.return_value, bad.attempts) == (TaskResultStatus.SUCCESSFUL, "middle", 2)
    assert sorted(Group.objects.values_list("name", flat=True)) == [
        "attempt-middle",
        "first",
        "fixed-middle",
        "last",
        "middle",
    ]


def test_a_receiver_that_raises_does_not_undo_a_done_task(tasks_channel):
    def broken(sender, task_result, **kwargs):
        raise RuntimeError("a broken error monitor")

    task_finished.connect(broken)
    try:
        result = tasks.insert_row.enqueue("monitored")
        drain()
    finally:
        task_finished.disconnect(broken)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert ready(tasks_channel.queue) == 0 and TaskFailure.objects.count() == 0


def test_each_django_queue_has_its_broker_queue_and_channel(settings, tasks_channel):
    settings.TASKS = {"default": {"BACKEND": "nightjar_tasks.backend.NightjarBackend", "QUEUES": ["default", "emails"]}}
    emails = TasksChannel("emails")
    assert (emails.name, emails.queue) == ("tasks.emails", f"{tasks_channel.queue}.emails")
    channel.register(emails)
    try:
        result = tasks.add.using(queue_name="emails").enqueue(1, 2)
        assert (ready(emails.queue), ready(tasks_channel.queue)) == (1, 0)
        channel.select("tasks.emails")
        drain()
        assert tasks.add.get_result(result.id).return_value == 3
        with pytest.raises(InvalidTaskError):
            tasks.add.using(queue_name="unknown").enqueue(1, 2)
    finally:
        channel.unregister("tasks.emails")


def test_the_runner_s_own_sql_reads_and_marks_the_row_as_the_orm_would():
    """rows.read and marks.mark_done send SQL of their own (issue 25, speed):
    every field must come back as the ORM reads it, and the done-mark store
    what the ORM's update would."""
    later = timezone.now() + timedelta(hours=1)
    record = TaskRecord.objects.create(
        task_path="tests.task_functions.add",
        args=[1, {"a": [2, None]}],
        kwargs={"x": "é"},
        run_after=later,
        errors=[{"exception_class_path": "builtins.ValueError", "traceback": "t"}],
        worker_ids=["w:1"],
        attempts=2,
    )
    read = rows.read(record.pk)
    stored = TaskRecord.objects.get(pk=record.pk)
    for field in TaskRecord._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(stored, field.attname), field.name
    assert not read._state.adding
    started = timezone.now()
    read.status, read.started_at, read.worker_ids = TaskResultStatus.RUNNING, started, [*read.worker_ids, "w:2"]
    marks.mark_done(connection, read, {"sum": [3]}, started)
    done = TaskRecord.objects.get(pk=record.pk)
    assert (done.status, done.attempts, done.return_value) == (TaskResultStatus.SUCCESSFUL, 3, {"sum": [3]})
    assert (done.started_at, done.last_attempted_at, done.worker_ids) == (started, started, ["w:1", "w:2"])
    assert done.finished_at == read.finished_at and done.run_after == later
    with pytest.raises(TaskRecord.DoesNotExist):
        rows.read(record.pk + 1000)


def test_enqueue_s_own_insert_stores_the_row_the_orm_would_and_save_when_a_receiver_listens():
    """rows.insert writes the enqueued row with a plain INSERT (issue 51,
    the enqueue's price): the stored row must be the ORM's, field by field;
    with a pre_save receiver for TaskRecord, save() runs, so it hears it."""
    later = timezone.now() + timedelta(hours=1)
    fields = {"task_path": "tests.task_functions.add", "args": [1, {"a": [2, None]}], "kwargs": {"x": "é"}}
    fields |= {"run_after": later, "enqueue_key": "k-1", "takes_context": True, "atomic": False}
    ours, theirs = TaskRecord(**fields), TaskRecord(**{**fields, "enqueue_key": "k-2"})
    rows.insert(ours)
    theirs.save(force_insert=True)
    assert not ours._state.adding
    mine, orm = TaskRecord.objects.get(pk=ours.pk), TaskRecord.objects.get(pk=theirs.pk)
    for field in TaskRecord._meta.concrete_fields:
        if field.name not in ("id", "enqueue_key", "enqueued_at"):
            assert getattr(mine, field.attname) == getattr(orm, field.attname), field.name
    assert (mine.enqueue_key, mine.enqueued_at) == ("k-1", ours.enqueued_at)
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.insert(TaskRecord(**fields))  # the key's unique index, as the ORM's insert would meet it

    heard = []

    def receiver(sender, instance, **kwargs):
        heard.append(instance.task_path)

    pre_save.connect(receiver, sender=TaskRecord)
    try:
        tasks.add.enqueue(1, 1)
    finally:
        pre_save.disconnect(receiver, sender=TaskRecord)
    assert heard == ["tests.task_functions.add"]


def test_the_claim_inserts_the_key_only_for_a_task_to_run_here_and_reads_the_row_as_the_orm_would():
    """marks.claim (one statement on PostgreSQL, two elsewhere): the key of a
    ready task inserted in the caller's transaction and its row read as the ORM
    reads it; nothing inserted for a task whose key is there already, one done
    or given up, or one that opted out of the shared transaction."""
    record = TaskRecord.objects.create(task_path="tests.task_functions.add", args=[1, 2], kwargs={"x": "é"})
    with transaction.atomic():
        read, owned = marks.claim(connection, record.pk)
        assert owned and TaskCompletion.objects.filter(task_id=record.pk).exists()
        stored = TaskRecord.objects.get(pk=record.pk)
        for field in TaskRecord._meta.concrete_fields:
            assert getattr(read, field.attname) == getattr(stored, field.attname), field.name
        assert marks.claim(connection, record.pk)[1] is False  # the key is there: a repeat runs nothing
        transaction.set_rollback(True)
    assert not TaskCompletion.objects.exists()  # rolled back with the transaction
    opted_out = TaskRecord.objects.create(task_path="tests.task_functions.insert_row_outside", atomic=False)
    done = TaskRecord.objects.create(task_path="tests.task_functions.add", status=TaskResultStatus.SUCCESSFUL)
    failed = TaskRecord.objects.create(task_path="tests.task_functions.add", status=TaskResultStatus.FAILED)
    with transaction.atomic():
        for row in (opted_out, done, failed):
            read, owned = marks.claim(connection, row.pk)
            assert (read.pk, read.status, owned) == (row.pk, row.status, False)
    assert not TaskCompletion.objects.exists()
    with pytest.raises(TaskRecord.DoesNotExist), transaction.atomic():
        marks.claim(connection, failed.pk + 1000)


def test_a_batch_s_rows_and_its_done_marks_are_what_the_orm_reads_and_writes():
    """rows.read_many (a batch's rows, no query compiler) reads what
    in_bulk reads; marks.done_values prepares what the fields' get_db_prep_save
    prepares, so a row marked done by the hot path reads back as the ORM
    wrote it (the datetimes: nightjar_delivery/sql.py's stored and loaded)."""
    moments = [timezone.now(), timezone.now().replace(microsecond=0), timezone.now() - timedelta(days=400)]
    records = [
        TaskRecord.objects.create(
            task_path="tests.task_functions.add", args=[n], started_at=moment, run_after=moment, worker_ids=["w:1"]
        )
        for n, moment in enumerate(moments)
    ]
    pks = [record.pk for record in records]
    read = rows.read_many([*pks, pks[0], 10**9])  # a repeat and a missing id, as in_bulk takes them
    orm = TaskRecord.objects.in_bulk(pks)
    assert set(read) == set(orm) == set(pks)
    for pk in pks:
        for field in TaskRecord._meta.concrete_fields:
            assert getattr(read[pk], field.attname) == getattr(orm[pk], field.attname), field.name
    fields = marks.DONE_FIELDS
    for record, moment in zip(records, moments, strict=True):
        record.status, record.finished_at, record.return_value = TaskResultStatus.SUCCESSFUL, moment, {"é": [1]}
        record.last_attempted_at = moment
        ours = marks.done_values(connection, record)
        django_s = [field.get_db_prep_save(getattr(record, field.attname), connection) for field in fields]
        unwrapped = lambda values: [getattr(value, "obj", value) for value in values]  # noqa: E731 (psycopg's Jsonb)
        assert unwrapped(ours) == unwrapped(django_s)
    marks.mark_done_many(records)
    for record, moment in zip(records, moments, strict=True):
        stored = TaskRecord.objects.get(pk=record.pk)
        assert (stored.finished_at, stored.last_attempted_at, stored.started_at) == (moment, moment, moment)
        assert (stored.status, stored.return_value, stored.attempts) == ("SUCCESSFUL", {"é": [1]}, 1)


@settings(max_examples=200, deadline=None)
@given(st.datetimes(timezones=st.just(UTC)))
def test_a_datetime_stored_then_loaded_is_the_same_instant_as_django_s_own(moment):
    """nightjar_delivery/sql.py writes and reads a DateTimeField as Django's own
    adapter and converter do (for any aware datetime; SQLite keeps UTC text)."""
    ops = connection.ops
    assert sql.stored(moment) == ops.adapt_datetimefield_value(moment)
    if connection.vendor == "sqlite":
        text = sql.stored(moment)
        django_s = ops.convert_datetimefield_value(text, None, connection)
        assert sql.loaded(text) == django_s == moment
    assert sql.loaded(None) is None


def test_a_body_s_on_commit_callback_runs_after_the_commit_and_its_update_counts():
    """A body's on_commit callbacks run after the task's commit, as Django
    runs them, and their statements behave as anywhere else (an UPDATE's
    row count known, so save() does not try an INSERT)."""
    result = tasks.insert_then_rename_on_commit.enqueue("hook")
    drain()
    assert list(Group.objects.values_list("name", flat=True)) == ["hook-committed"]
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "hook")


def test_a_statement_sent_with_the_commit_commits_with_it_or_fails_with_nothing_committed():
    """sql.execute_and_commit (the done-mark: on PostgreSQL the statement
    and the COMMIT in one round trip): the block's writes and the statement
    are committed together and the on_commit callbacks run once, after it;
    a failing statement raises Django's error with nothing committed and no
    callback run; inside an outer block it commits nothing of its own."""
    names = lambda: sorted(Group.objects.values_list("name", flat=True))  # noqa: E731
    insert, ran = f"INSERT INTO {Group._meta.db_table} (name) VALUES (%s)", []
    with transaction.atomic():
        Group.objects.create(name="a")
        transaction.on_commit(lambda: ran.append(names()))
        sql.execute_and_commit(insert, ["b"])
    assert ran == [["a", "b"]]
    with pytest.raises(IntegrityError), transaction.atomic():
        Group.objects.create(name="c")
        transaction.on_commit(lambda: ran.append("never"))
        sql.execute_and_commit(insert, ["a"])  # a duplicate name
    with pytest.raises(RuntimeError), transaction.atomic():
        with transaction.atomic():
            sql.execute_and_commit(insert, ["d"])
        raise RuntimeError("the outer block fails after the inner one")
    assert (names(), ran) == (["a", "b"], [["a", "b"]])


@pytest.mark.parametrize("batch", [None, 10])
def test_a_body_that_swallows_a_database_error_fails_and_is_not_marked_done(tasks_channel, batch):
    """Django marks a transaction for rollback when a statement fails inside
    it, even when the body catches the error: the body's writes will not be
    committed. The task must not be SUCCESSFUL with its effect gone: its
    attempt fails, saying why, and the rows of the batch's other tasks stay."""
    other = tasks.insert_row.enqueue("neighbour")
    result = tasks.insert_then_swallow_a_duplicate.enqueue("swallowed")
    drain(batch=batch)
    result.refresh(), other.refresh()
    assert (other.status, other.return_value) == (TaskResultStatus.SUCCESSFUL, "neighbour")
    assert result.status == TaskResultStatus.FAILED
    assert "TransactionManagementError: The code run in the transaction (a handler, a task's body) caught" in (
        result.errors[-1].traceback
    )
    assert "Django marked the transaction for rollback" in result.errors[-1].traceback
    assert list(Group.objects.values_list("name", flat=True)) == ["neighbour"]
    assert not TaskCompletion.objects.filter(task_id=int(result.id)).exists()
    assert TaskParked.objects.filter(task_id=int(result.id)).count() == 1
    assert ready(tasks_channel.queue) == 0


@pytest.mark.parametrize("batch", [None, 10])
def test_a_failed_body_s_on_commit_callbacks_never_run(tasks_channel, batch):
    kept = tasks.insert_then_rename_on_commit.enqueue("kept")
    failed = tasks.register_on_commit_then_fail.enqueue("dropped")
    drain(batch=batch)
    failed.refresh(), kept.refresh()
    assert (failed.status, kept.status) == (TaskResultStatus.FAILED, TaskResultStatus.SUCCESSFUL)
    assert list(Group.objects.values_list("name", flat=True)) == ["kept-committed"]


@pytest.mark.parametrize(
    "how, batch", [("sleep", None), ("busy", None), ("swallowing", None), ("socket", None), ("sleep", 10)]
)
def test_a_body_past_its_time_limit_is_stopped_whatever_it_does(how, batch):
    stuck = tasks.stuck.enqueue(f"stuck-{how}", how)  # time_limit 1 s
    after = tasks.add.enqueue(1, 2)
    drain(batch)
    stuck.refresh()
    after.refresh()
    assert stuck.status == TaskResultStatus.READY  # to be retried (max_attempts 2)
    assert stuck.errors[-1].traceback.strip().splitlines()[-1] == (
        "nightjar_tasks.limits.TimeLimitExceeded: timed out after 1 s"
    )
    assert not Group.objects.filter(name=f"stuck-{how}").exists()  # rolled back
    assert after.status == TaskResultStatus.SUCCESSFUL


def test_on_sqlite_a_batch_shares_one_lock_budget_and_what_it_does_not_reach_is_put_back_uncharged(
    tmp_path, monkeypatch
):
    if connection.vendor != "sqlite":
        return  # (PostgreSQL: row locks, no budget to share)
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 2)  # a budget of 1 s for the batch
    runs = tmp_path / "runs"
    slow = [tasks.slow_run.enqueue(f"slow-{n}", 0.6, str(runs)) for n in range(2)]  # 1.2 s: one does not fit
    drain(batch=10)
    for result in slow:
        result.refresh()
        assert result.errors == []  # the batch's budget is not the task's failure
    put_back = TaskRecord.objects.filter(status=TaskResultStatus.READY)
    assert put_back.count() >= 1 and not put_back.filter(published_at__isnull=False).exists()
    assert Group.objects.filter(name__startswith="slow-").count() == 2 - put_back.count()  # rolled back
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 20)
    reconcile()  # publishes what was put back at once (never published)
    drain(batch=10)
    for result in slow:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
    assert Group.objects.filter(name__startswith="slow-").count() == 2


def test_the_transports_threads_never_take_the_worker_s_signals():
    """A signal the kernel hands to a background thread would not interrupt the
    main thread's sleep or socket read (the body's), so Ctrl+C and the time limit
    would wait for it: every thread the transports start blocks them."""
    import threading

    from nightjar_delivery import transport

    seen = {}

    def run():
        transport.background_thread()
        seen["blocked"] = signals.pthread_sigmask(signals.SIG_BLOCK, set())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["blocked"] >= transport.WORKER_SIGNALS
    assert not transport.WORKER_SIGNALS & signals.pthread_sigmask(
        signals.SIG_BLOCK, set()
    )  # the main thread's unchanged


@pytest.mark.fast
def test_on_postgresql_a_batchs_completion_keys_are_one_statement_text_whatever_its_size():
    """A tasks batch's completion keys go as one array: one statement text
    for batches of any size, prepared once per connection (a multi-row VALUES
    of 100 parameters had psycopg parse its text anew on every batch)."""
    if connection.vendor != "postgresql":
        pytest.skip("arrays and prepared statements are PostgreSQL's; bin/test runs the fast tier on PostgreSQL too")
    ids = [TaskRecord.objects.create(task_path="tests.task_functions.add").pk for _ in range(21)]
    start = 0
    for size in range(1, 7):  # six batches of six sizes: 21 tasks
        batch = ids[start : start + size]
        start += size
        assert marks.insert_keys(batch) == set(batch)
    assert marks.insert_keys(ids[:3] + ids[:3]) == set()  # the keys are there (and repeated): nothing new
    assert sorted(TaskCompletion.objects.values_list("task_id", flat=True)) == sorted(ids)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("INSERT INTO nightjar_tasks_taskcompletion" in statement for statement in prepared), prepared


@pytest.mark.fast
def test_sql_execute_returns_rows_without_psycopgs_description(monkeypatch):
    """sql.execute says whether a statement returned rows without making the
    cursor's description: psycopg builds a Column object per column (~15 µs
    for the claim's row, every task on PostgreSQL, issue 43)."""
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's description; bin/test runs the fast tier on PostgreSQL too")
    import psycopg

    def refused(cursor):
        raise AssertionError("description made")

    monkeypatch.setattr(psycopg.Cursor, "description", property(refused))
    pk = TaskRecord.objects.create(task_path="tests.task_functions.add").pk
    table = TaskRecord._meta.db_table
    assert sql.execute(f"SELECT id, status FROM {table} WHERE id = %s", [pk]) == [(pk, "READY")]
    assert sql.execute(f"SELECT id FROM {table} WHERE id = %s", [pk + 1]) == []
    assert sql.execute(f"UPDATE {table} SET attempts = attempts + 1 WHERE id = %s", [pk]) == []
    assert sql.execute(f"UPDATE {table} SET attempts = 5 WHERE id = %s RETURNING attempts", [pk]) == [(5,)]


@pytest.mark.fast
def test_the_claim_makes_the_record_without_its_init_unless_an_init_signal_listens(monkeypatch):
    """marks.claim's record (PostgreSQL: the claim's row; SQLite: rows.read)
    is made as Model.from_db makes it, without __init__ (~8 µs a task), when
    no receiver of pre_init/post_init would miss it; else through from_db."""
    pk = tasks.add.enqueue(1, 2).id
    expected = TaskRecord.objects.get(pk=pk)

    def refused(self, *args, **kwargs):
        raise AssertionError("__init__ run")

    with monkeypatch.context() as patched, transaction.atomic():
        patched.setattr(TaskRecord, "__init__", refused)
        record, owned = marks.claim(connection, int(pk))
        transaction.set_rollback(True)
    assert owned and [getattr(record, f.attname) for f in rows.FIELDS] == [
        getattr(expected, f.attname) for f in rows.FIELDS
    ]
    seen = []
    receiver = lambda sender, instance, **kwargs: seen.append(instance.pk)  # noqa: E731
    post_init.connect(receiver, sender=TaskRecord)
    try:
        with transaction.atomic():
            record, owned = marks.claim(connection, int(pk))
            transaction.set_rollback(True)
    finally:
        post_init.disconnect(receiver, sender=TaskRecord)
    assert owned and seen == [record.pk]


@pytest.mark.skipif(
    django.VERSION[:2] == (6, 0),
    reason="Django 6.0's task() passes no option to a backend's task_class (6.1 and the backport do):"
    " there @retry(...) is the way, as docs/tasks.md says",
)
def test_task_takes_nightjar_s_options_itself_and_refuses_a_wrong_one_with_a_sentence(monkeypatch):
    """Issue 51: on Django 6.1, `@task(max_attempts=5)` raised Django's raw
    TypeError (Task has no such field). The backend declares its task_class,
    which takes Nightjar's options (max_attempts, backoff, time_limit,
    atomic) as @retry does; a wrong value is InvalidTaskError naming it."""
    failing = compat.task(max_attempts=1, backoff=0, time_limit=5)(tasks.always_fails)
    monkeypatch.setattr(tasks, "always_fails", failing)  # the path the worker imports
    assert backends.retry_options(failing, "default") | {"atomic": True} == {
        "max_attempts": 1,
        "backoff": 0,
        "time_limit": 5,
        "atomic": True,
    }
    result = failing.enqueue("once")
    assert failing.using(queue_name="default").max_attempts == 1  # using() keeps them
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED  # its own max_attempts, 1, not the backend's 3
    assert TaskParked.objects.filter(task_id=int(result.id)).count() == 1
    with pytest.raises(InvalidTaskError, match=r"max_attempts must be a whole number of at least 1, not 0"):
        compat.task(max_attempts=0)(failing.func)
    with pytest.raises(TypeError, match="max_attemps"):  # a misspelt option: Python names it
        compat.task(max_attemps=2)(failing.func)
