"""The backend class for Django's TASKS setting:

    TASKS = {"default": {"BACKEND": "nightjar_tasks.backend.NightjarBackend"}}

enqueue() writes the task's row in the caller's transaction and publishes it
after the commit (rolled back: never published, never run); get_result()
reads the row, from any process. The worker (`worker --channel tasks`) runs
it: nightjar_tasks/runner.py."""

import dataclasses
import json

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_delivery import get_channel, publish_on_commit, publish_transaction, storable_text
from nightjar_tasks import checks, conf, rows
from nightjar_tasks.compat import (
    BaseTaskBackend,
    InvalidTaskError,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from nightjar_tasks.models import TaskRecord


class EnqueueKeyConflict(ValueError):
    """enqueue_once() with a key already given to other work (another task or other arguments)."""


def stored_arguments(args, kwargs) -> tuple[list, dict]:
    """The arguments as the row stores them: JSON values only, refused before
    any SQL (NaN and infinity too, which a JSON column refuses with an
    IntegrityError that would break the caller's transaction)."""
    args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
    try:  # one serialisation checks all three (it is on every enqueue)
        text = json.dumps([args, kwargs], allow_nan=False, ensure_ascii=False)
    except ValueError:
        raise ValueError("A task's arguments must be JSON: NaN and infinity are not.") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("A task's arguments must be storable text: a lone surrogate is not.") from None
    if "\\u0000" in text:  # PostgreSQL's jsonb refuses NUL in a string (a DataError in the caller's transaction)
        raise ValueError("A task's arguments must be storable text: NUL is not.")
    return args, kwargs


def checked_key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"An enqueue key is a string, not {type(key).__name__}.")
    # storable_text escapes a NUL or a lone surrogate: a key it changes is not plain text.
    if not key or storable_text(key, max_bytes=800) != key or len(key) > 200:
        raise ValueError("An enqueue key is 1 to 200 characters of plain text.")
    return key


OWN_OPTIONS = ("max_attempts", "backoff", "time_limit", "atomic")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NightjarTask(Task):
    """The backend's task_class: `@task(max_attempts=5, backoff=0.5,
    time_limit=30, atomic=False)` takes Nightjar's options itself (Django's
    Task has no such fields: its TypeError), as `@retry(...)` under `@task`
    does; None: @retry's, else the backend's OPTIONS. Checked with the
    task (NightjarBackend.validate_task)."""

    max_attempts: int | None = None
    backoff: float | None = None
    time_limit: float | None = None
    atomic: bool | None = None


def retry_options(task, alias: str) -> dict:
    """max_attempts, backoff, time_limit and atomic of a task: its own
    (@task(...) of NightjarTask, then nightjar_tasks.retry) over the
    backend's OPTIONS."""
    chosen = {**conf.options(alias), "atomic": True}
    own = getattr(task.func, "nightjar_retry", None) or {}
    chosen.update({key: value for key, value in own.items() if value is not None})
    if isinstance(task, NightjarTask):
        chosen.update({key: value for key in OWN_OPTIONS if (value := getattr(task, key)) is not None})
    return chosen


def own_option_problems(task) -> list[str]:
    """What is wrong with the options a task gives itself, one sentence each."""
    if not isinstance(task, NightjarTask):
        return []
    problems = []
    if task.max_attempts is not None and (type(task.max_attempts) is not int or task.max_attempts < 1):
        problems.append(f"max_attempts must be a whole number of at least 1, not {task.max_attempts!r}")
    if task.backoff is not None and (not _seconds(task.backoff) or task.backoff < 0):
        problems.append(f"backoff must be a number of seconds (0 or more), not {task.backoff!r}")
    if task.time_limit is not None and (not _seconds(task.time_limit) or not task.time_limit > 0):
        problems.append(f"time_limit must be a number of seconds above 0, not {task.time_limit!r}")
    if task.atomic is not None and not isinstance(task.atomic, bool):
        problems.append(f"atomic must be True or False, not {task.atomic!r}")
    return problems


def _seconds(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def to_result(record: TaskRecord, task=None) -> TaskResult:
    """The TaskResult a row says (task: the Task object, imported when not given)."""
    if task is None:
        task = import_string(record.task_path)
    stored = {"queue_name": record.queue_name, "priority": record.priority, "run_after": record.run_after}
    stored["backend"] = record.backend
    changes = {name: value for name, value in stored.items() if value is not None and getattr(task, name) != value}
    if changes:  # (using() makes and validates a new Task: not per delivery when the row says what the task does)
        task = task.using(**changes)
    result: TaskResult = TaskResult(
        task=task,
        id=str(record.pk),
        status=TaskResultStatus(record.status),
        enqueued_at=record.enqueued_at,
        started_at=record.started_at,
        last_attempted_at=record.last_attempted_at,
        finished_at=record.finished_at,
        args=record.args,
        kwargs=record.kwargs,
        backend=record.backend,
        errors=[TaskError(**error) for error in record.errors],
        worker_ids=list(record.worker_ids),
    )
    object.__setattr__(result, "_return_value", record.return_value)
    return result


class NightjarBackend(BaseTaskBackend):
    task_class = NightjarTask
    supports_defer = True
    supports_get_result = True
    # Not proven, so refused at enqueue (README: "where the promise stops"):
    # an async body would run its queries on another thread's connection,
    # outside the transaction that marks the task done; and one broker queue
    # delivers in order, so priority would be a promise the worker cannot keep.
    supports_async_task = False
    supports_priority = False

    def validate_task(self, task) -> None:
        super().validate_task(task)
        if problems := own_option_problems(task):
            raise InvalidTaskError(f"{task.module_path}: {'; '.join(problems)} (@task's options, as @retry's).")

    def enqueue(self, task, args, kwargs, *, key: str | None = None) -> TaskResult:
        self.validate_task(task)
        options = retry_options(task, self.alias)
        args, kwargs = stored_arguments(args, kwargs)
        if key is not None:
            return self._enqueue_once(task, args, kwargs, checked_key(key), options)
        return self._enqueue(task, args, kwargs, None, options)

    def _enqueue_once(self, task, args, kwargs, key: str, options) -> TaskResult:
        """The same key again: the task it was first given to, if it is the
        same work (path, arguments, queue), else EnqueueKeyConflict. The
        unique index decides between concurrent callers: the second insert
        waits for the first transaction (PostgreSQL's index; SQLite's single
        writer), then fails in a savepoint of its own and reads the winner."""
        try:
            with transaction.atomic():
                return self._enqueue(task, args, kwargs, key, options)
        except IntegrityError:
            existing = TaskRecord.objects.filter(enqueue_key=key).first()
            if existing is None:
                raise
        same = (existing.task_path, existing.args, existing.kwargs, existing.queue_name, existing.backend) == (
            task.module_path,
            args,
            kwargs,
            task.queue_name,
            self.alias,
        )
        if not same:
            raise EnqueueKeyConflict(
                f"The enqueue key {key!r} was given to task {existing.pk} ({existing.task_path} with other arguments)."
            )
        return to_result(existing, task)

    def _enqueue(self, task, args, kwargs, key: str | None, options) -> TaskResult:
        now = timezone.now()
        due = task.run_after is None or task.run_after <= now
        record = TaskRecord(
            enqueue_key=key,
            task_path=task.module_path,
            args=args,
            kwargs=kwargs,
            queue_name=task.queue_name,
            backend=self.alias,
            priority=task.priority,
            takes_context=task.takes_context,
            run_after=task.run_after,
            enqueued_at=now,
            published_at=now if due else None,  # a deferred one: reconcile publishes it when due
            atomic=options["atomic"],
        )
        channel = get_channel(conf.channel_name(record.queue_name))
        # The database transport: the row and its message in one transaction (publish_transaction).
        with publish_transaction(channel):
            rows.insert(record)
            if due:
                # Published only if the caller's transaction commits (at once in autocommit). Safe
                # in its row: on a broker the engine publishes it after the commit without waiting
                # for the broker's confirm (a failed publish is logged and left for reconcile, whose
                # period bounds its wait; the confirm would only shorten the wait to its first run).
                publish_on_commit(channel, record, wait=False)
        result = to_result(record, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            record = TaskRecord.objects.get(pk=int(result_id))
        except (ValueError, TypeError, OverflowError, TaskRecord.DoesNotExist):
            raise TaskResultDoesNotExist(result_id) from None
        return to_result(record)

    def check(self, **kwargs):
        yield from super().check(**kwargs)
        yield from checks.backend_problems(self)
