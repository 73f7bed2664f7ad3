"""Nightjar as a backend for Django's Tasks framework, on the delivery engine.

    TASKS = {"default": {"BACKEND": "nightjar_tasks.backend.NightjarBackend"}}

`retry` (below) sets a task's own retry limit, backoff, time limit, and
whether its body shares the transaction that records its result (the
default: exactly one database effect per task); `enqueue_once` (below)
makes the enqueue side exactly once too; `cancel` (below) cancels a task
that has not started."""

from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def retry(
    *,
    max_attempts: int | None = None,
    backoff: float | None = None,
    time_limit: float | None = None,
    atomic: bool = True,
) -> Callable[[_F], _F]:
    """Under @task: how many attempts a task gets (its first run included),
    the backoff in seconds (attempt n+1 waits backoff * 2**(n-1)) and the
    time limit of one attempt in seconds (past it the body is stopped, rolled
    back and the attempt fails); None: the backend's OPTIONS. atomic=False
    runs the body outside the transaction that marks it done: its database
    writes may then repeat after a crash (at-least-once), and its result
    says so.

        @task
        @retry(max_attempts=5, backoff=0.5, time_limit=30)
        def send_report(report_id): ...
    """

    def mark(function: _F) -> _F:
        function.nightjar_retry = {  # type: ignore[attr-defined]  # read back by the backend (backend.retry_options)
            "max_attempts": max_attempts,
            "backoff": backoff,
            "time_limit": time_limit,
            "atomic": atomic,
        }
        return function

    return mark


def enqueue_once(task: Any, key: str, /, *args: Any, **kwargs: Any) -> Any:
    """task.enqueue(*args, **kwargs), once per key: the same key again returns
    the TaskResult of the task it was first given to (same task, arguments
    and queue), or raises nightjar_tasks.backend.EnqueueKeyConflict (other
    work); a key is 1-200 characters. Stored with the task's row, in the
    caller's transaction: rolled back, the key is free again.

        enqueue_once(close_invoice, f"close-invoice-{invoice.pk}", invoice.pk)
    """
    backend = task.get_backend()
    if not hasattr(backend, "_enqueue_once"):
        raise TypeError(f"enqueue_once needs Nightjar's backend; {task.backend!r} is {type(backend).__name__}.")
    return backend.enqueue(task, args, kwargs, key=key)


def cancel(task, /, *, actor: str = "code", reason: str = ""):
    """Cancel a task that has not started (a TaskResult or its id): it becomes
    FAILED, its last error nightjar_tasks.cancelling.Cancelled with who and
    why, and never runs; a worker claiming it at that moment either runs it
    (the cancel is refused) or finds it cancelled, never both. Raises
    nightjar_tasks.CannotCancel (a DomainError) with a sentence: done,
    failed or parked already, atomic=False, or no such task.

        cancel(result, actor="billing", reason="the invoice was voided")
    """
    from nightjar_tasks.cancelling import cancel_task, task_id_of

    return cancel_task(task_id=task_id_of(task), actor=actor, reason=reason)


def idempotency_key(context, purpose: str = "", /) -> str:
    """A key for a call to another service that honours one (an HTTP
    `Idempotency-Key` header, a payment API's key): the same on every attempt,
    retry and redelivery of this task, different for every task (a task
    given by enqueue_once's repeat is the same task: the same key). purpose
    tells apart several calls of one task. The task takes its context:

        @task(takes_context=True)
        def charge(context, order_id):
            requests.post(URL, json=..., headers={"Idempotency-Key": idempotency_key(context, "charge")})

    With a service that keeps the key, the call's effect happens once however
    often the task runs; without one it happens once per attempt (docs/tasks.md)."""
    key = f"nightjar-task-{context.task_result.id}"
    return f"{key}-{purpose}" if purpose else key


def __getattr__(name: str):
    if name == "CannotCancel":  # (imported when asked: the models need the app registry)
        from nightjar_tasks.cancelling import CannotCancel

        return CannotCancel
    raise AttributeError(f"module 'nightjar_tasks' has no attribute {name!r}")
