"""Nightjar as a backend for Django's Tasks framework, on the delivery engine.

    TASKS = {"default": {"BACKEND": "nightjar_tasks.backend.NightjarBackend"}}

`retry` (below) sets a task's own retry limit, backoff, time limit, and
whether its body shares the transaction that records its result (the
default: exactly one database effect per task)."""


def retry(
    *,
    max_attempts: int | None = None,
    backoff: float | None = None,
    time_limit: float | None = None,
    atomic: bool = True,
):
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

    def mark(function):
        function.nightjar_retry = {
            "max_attempts": max_attempts,
            "backoff": backoff,
            "time_limit": time_limit,
            "atomic": atomic,
        }
        return function

    return mark
