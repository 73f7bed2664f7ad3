"""One attempt of a task, as both handlers (runner.handle and
runner.handle_batch) make it: the task's code imported, the row as running,
the body called within its time limit, and what it left: the failure
recorded after the rollback, or the task_finished result of a task done."""

import dataclasses
import functools
import logging
import os
import socket
from datetime import timedelta

from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_delivery import get_channel, park, storable_text
from nightjar_tasks import backend as backends
from nightjar_tasks import compat, conf, limits
from nightjar_tasks.cancelling import is_cancelled
from nightjar_tasks.compat import TaskContext, TaskResult, TaskResultStatus, get_exception_traceback, get_module_path
from nightjar_tasks.models import TaskFailure, TaskRecord

SENDER = backends.NightjarBackend


def worker_id() -> str:
    return _worker_id(os.getpid())  # as the engine names its worker


@functools.cache
def _worker_id(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}"


class CodeGone(Exception):
    """A stored task's path no longer imports (removed or renamed by a deploy); its error says why."""

    def __init__(self, path: str, error: ImportError) -> None:
        super().__init__(path)
        self.error = error


def imported(path: str):
    try:
        return import_string(path)
    except ImportError as error:
        raise CodeGone(path, error) from error


def running(record: TaskRecord, task, started, me: str):
    """The row as running now (written only by the done-mark or the
    failure), and its TaskResult; None when no one would see one (a body
    without context, and task_started and task_finished not heard)."""
    record.status, record.last_attempted_at = TaskResultStatus.RUNNING, started
    record.started_at = record.started_at or started
    record.worker_ids = [*record.worker_ids, me]
    if task.takes_context or heard(compat.task_started) or heard(compat.task_finished):
        return backends.to_result(record, task)
    return None


# Each signal's receiver key (Django's: the receiver's id, the sender's; id(None): any sender) of that log line.
_OWN = {compat.task_started: (id(compat.log_task_started), id(None))}
_OWN[compat.task_finished] = (id(compat.log_task_finished), id(None))


def heard(signal) -> bool:
    """Whether sending task_started or a done task's task_finished would do
    anything: a receiver besides the Tasks framework's own log line, or that
    line's logger writing INFO (a done task's level). Sent only then, so a
    worker whose only listener is that log line, off, builds no TaskResult a
    task (to_result, the two sends and finished(): ~12 µs of a batch's ~65
    µs a task on SQLite, issue 43). Off by default on Django 5.2 (the
    backport's "django_tasks" logger under settings.py's root at WARNING);
    on Django 6 Django's own logging puts "django" at INFO, so "django.tasks"
    is on unless LOGGING says otherwise. A failure's task_finished is always
    sent."""
    receivers = signal.receivers  # [(its key, ...)], in Django 5.2 and 6.x
    if not receivers:
        return False
    return len(receivers) > 1 or receivers[0][0] != _OWN[signal] or compat.tasks_logger.isEnabledFor(logging.INFO)


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


def call(task, result, record: TaskRecord, alias: str, seconds: float | None = None):
    """The body, within its time limit (seconds: a shorter one, a batch's
    rest); result: running()'s, None for a body without context."""
    args, kwargs = (record.args, record.kwargs) if result is None else (result.args, result.kwargs)
    # (limits.Limit looked up per call: bench/peers runs the worker with it disarmed)
    with limits.Limit(seconds or seconds_for(task, record.backend, atomic=record.atomic, alias=alias), alias, record):
        if task.takes_context:
            return task.call(TaskContext(task_result=result), *args, **kwargs)
        return task.call(*args, **kwargs)


def record_failure(record: TaskRecord, error: BaseException, started, me: str) -> TaskRecord:
    """After the rollback: note the attempt; retry after the backoff, or at
    the limit FAILED and parked (one transaction). Returns the row as stored.
    A task whose code does not import (a rename not deployed everywhere yet)
    is retried too, within its backend's attempts and backoff (its own are
    in the code that is missing)."""
    try:
        options = backends.retry_options(import_string(record.task_path), record.backend)
    except ImportError:
        options = conf.options(record.backend)
    entry = {"exception_class_path": get_module_path(type(error)), "traceback": get_exception_traceback(error)}
    now = timezone.now()
    with transaction.atomic():
        row = TaskRecord.objects.select_for_update().get(pk=record.pk)
        # Cancelled between this attempt's rollback and now (nightjar_tasks/cancelling.py): the
        # attempt is noted, the cancel stays the task's last word (its error last, FAILED).
        cancelled = row.status == TaskResultStatus.FAILED and is_cancelled(row.errors)
        row.attempts += 1
        row.errors = [*row.errors[:-1], entry, row.errors[-1]] if cancelled else [*row.errors, entry]
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
        if cancelled:
            row.save()
        elif tries >= options["max_attempts"]:
            row.status, row.finished_at = TaskResultStatus.FAILED, now
            row.save()  # (first: FAILED already when the channel hears of the park)
            park(
                row,
                reason=f"{row.task_path} raised {type(error).__name__}: {first_line} (worker {me}); failed {tries} times",
                attempts=tries,
                excerpt=row.task_path,
                channel=get_channel(conf.channel_name(row.queue_name)),
            )
        else:
            row.status = TaskResultStatus.READY
            row.run_after = now + timedelta(seconds=options["backoff"] * 2 ** (tries - 1))
            row.published_at = None  # reconcile publishes it when due
            row.save()
    return row


class Parked(Exception):
    """The engine parked the task's delivery (its delivery limit, or the broker's dead letters): the task's error."""


class WorkerDied(Parked):
    """The worker running the task died, until the engine's delivery limit (killed, crashed, out of memory,
    or ended by the time limit's watchdog)."""


def fail_parked(record: TaskRecord, *, reason: str, deaths: int) -> None:
    """A task the engine parks (TasksChannel.on_park), inside the park's
    transaction: still READY (it never finished an attempt), it is FAILED
    now, its error saying why, so get_result() and nightjar_tasks_status say
    what staff must look at. A task parked out of its own attempts is FAILED
    already: left alone."""
    row = TaskRecord.objects.select_for_update().filter(pk=record.pk, status=TaskResultStatus.READY).first()
    if row is None:
        return
    if deaths:
        error: Parked = WorkerDied(
            f"The worker died {deaths} time{'s' if deaths != 1 else ''} while running it (killed, crashed, out of "
            "memory, or ended past its time limit): parked; see nightjar_parked."
        )
    else:
        error = Parked(f"Parked: {reason}")
    row.errors = [
        *row.errors,
        {
            "exception_class_path": get_module_path(type(error)),
            "traceback": f"{get_module_path(type(error))}: {error}\n",
        },
    ]
    row.status, row.finished_at = TaskResultStatus.FAILED, timezone.now()
    row.save(update_fields=["errors", "status", "finished_at"])


@functools.cache
def _result_fields(kind: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(kind))


def finished(result: TaskResult | None, record: TaskRecord, task) -> TaskResult | None:
    """The task_finished result of a task done now, None when no one would
    see it: its task_started result with the done values (no second
    task.using(), issue 25), or when running() made none and task_finished
    is heard now (a receiver connected since), the done row's."""
    if result is None:
        return backends.to_result(record, task) if heard(compat.task_finished) else None
    # (Not dataclasses.replace: its args were normalized once already; not copy.copy, which
    # takes ~13 µs through __reduce_ex__ for the backport's slotted dataclass, issue 25.)
    # Typed as a type: mypy mistakes the dataclass's class for one of its unhashable instances.
    kind: type = type(result)
    done: TaskResult = object.__new__(kind)
    for name in _result_fields(kind):
        object.__setattr__(done, name, getattr(result, name))
    for name, value in (
        ("status", TaskResultStatus.SUCCESSFUL),
        ("finished_at", record.finished_at),
        ("last_attempted_at", record.last_attempted_at),
        ("_return_value", record.return_value),
    ):
        object.__setattr__(done, name, value)
    return done
