"""A worker holds the deliveries it was given, alive or dead (issue 39),
proven with real worker processes on the real broker (RabbitMQ, or Redis with
NIGHTJAR_TEST_TRANSPORT=redis): a live worker keeps its delivery however long
the body runs (RabbitMQ's heartbeats answered, Redis's entries not claimed
by another consumer), and a worker's death is charged only to the delivery
it was running. The tasks are tests/task_functions.py."""

import signal

import pytest

from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord
from tests import task_functions as tasks
from tests.conftest import TRANSPORT
from tests.helpers import until
from tests.test_tasks_broker import TASKS

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]

# Both well below the body's run (slow_run below): RabbitMQ closes a
# connection that misses two heartbeats; XAUTOCLAIM takes an entry idle that long.
HEARTBEAT, CLAIM_IDLE = 1, 1
BODY_SECONDS = 6  # longer than twice each, and than the claiming worker's look-round (5 s)


@pytest.fixture(autouse=True)
def tasks_queue(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE}


def short_lived_env(env: dict, name: str) -> dict:
    """A worker whose broker gives up on a silent consumer within seconds."""
    url = env["NIGHTJAR_BROKER_URL"]
    if TRANSPORT == "amqp":
        url += ("&" if "?" in url else "?") + f"heartbeat={HEARTBEAT}"
    return {
        **env,
        "NIGHTJAR_BROKER_URL": url,
        "NIGHTJAR_CLAIM_IDLE_SECONDS": str(CLAIM_IDLE),
        "NIGHTJAR_CONSUMER_NAME": name,  # Redis: two consumers of one group
    }


def test_a_live_worker_keeps_its_delivery_while_a_long_body_runs(workers, worker_env, tmp_path):
    runs = tmp_path / "runs"
    first = workers.start(*TASKS, "--serve", env=short_lived_env(worker_env, "first"))
    first.wait_for("Serving")
    slow = tasks.slow_run.enqueue("slow", BODY_SECONDS, str(runs))
    first.wait_for(f"Received task {slow.id}")
    # A second worker of the channel, there to take the delivery if the first lost it.
    second = workers.start(*TASKS, "--serve", env=short_lived_env(worker_env, "second"))
    second.wait_for("Serving")
    first.wait_for("Handler returned.", timeout=BODY_SECONDS + 30)
    after = tasks.add.enqueue(1, 2)  # the queue goes on: whoever takes it, it runs once
    until(lambda: tasks.add.get_result(after.id).status == TaskResultStatus.SUCCESSFUL, what="the next task")
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
    outputs = [worker.finish()[1] for worker in (first, second)]
    after.refresh()
    slow.refresh()
    assert (slow.status, after.status) == (TaskResultStatus.SUCCESSFUL, TaskResultStatus.SUCCESSFUL)
    assert runs.read_text().splitlines() == ["slow"]  # one run
    assert not any("redelivered=True" in output for output in outputs), "\n---\n".join(outputs)  # no redelivery
    assert not any("unavailable" in output for output in outputs), "\n---\n".join(outputs)  # never cut off


def test_a_worker_death_is_charged_only_to_the_task_it_was_running(workers, worker_env, settings):
    """One task that kills its worker (os._exit) enqueued before five
    ordinary ones, the worker serving with prefetch 10 and restarted after
    each death as systemd's Restart=always would: the culprit alone is parked
    after Nightjar's own delivery limit, the five run."""
    settings.NIGHTJAR_DELIVERY_LIMIT = 2  # the queue is declared with it at the first enqueue
    env = {**worker_env, "NIGHTJAR_DELIVERY_LIMIT": "2", "NIGHTJAR_CONSUMER_NAME": "restarted"}
    culprit = tasks.die.enqueue(1)
    innocents = [tasks.add.enqueue(n, n) for n in range(5)]

    def settled() -> bool:
        done = TaskRecord.objects.filter(pk__in=[r.id for r in innocents], status=TaskResultStatus.SUCCESSFUL)
        return done.count() == 5 and TaskParked.objects.holding().filter(task_id=culprit.id).exists()

    deaths, outputs = 0, []
    while True:
        worker = workers.start(*TASKS, "--serve", "--prefetch", "10", "--reconcile-every", "1", env=env)
        until(lambda: worker.proc.poll() is not None or settled(), timeout=60, what="a death or the end")  # noqa: B023
        if worker.proc.poll() is None:
            break
        deaths += 1
        outputs.append(worker.finish()[1])
        assert deaths <= 2 * 2 + 2, f"{deaths} deaths and still not settled:\n" + outputs[-1]
    worker.signal(signal.SIGTERM)
    status, output = worker.finish()
    assert status == 0, output
    # The five ran from the queue, not after reconcile's grace period (a stranded delivery).
    assert not any("Reconcile republished" in out for out in [*outputs, output]), output
    assert [p.task_id for p in TaskParked.objects.holding()] == [int(culprit.id)]  # the culprit alone
    assert "The worker died while handling it" in TaskParked.objects.holding().get().reason
    # Issue 51: parked for its deaths, it is FAILED, saying so (it stayed READY: a "lost publish" forever).
    parked = tasks.die.get_result(culprit.id)
    assert parked.status == TaskResultStatus.FAILED
    assert parked.errors[-1].exception_class_path == "nightjar_tasks.attempts.WorkerDied"
    assert "The worker died 2 times while running it" in parked.errors[-1].traceback
    print(f"{deaths} worker deaths; parked: the culprit alone; the 5 others SUCCESSFUL")
