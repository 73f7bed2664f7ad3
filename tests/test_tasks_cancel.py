"""Cancelling a task that has not started (nightjar_tasks.cancel, the admin's
action, `nightjar_cancel_task`): a cancelled task never runs, and against a
worker claiming it at that moment exactly one of "ran" and "cancelled" wins —
proven with a real worker process held at its checkpoints, per delivery and
in batches, on SQLite and (the postgres mark) PostgreSQL."""

import signal
import threading

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.db import connection

import nightjar_tasks
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord, TaskStaffAction
from tests import task_functions as tasks
from tests.helpers import MODES

CANCELLED = "nightjar_tasks.cancelling.Cancelled"
TASKS = ("--channel", "tasks")


@pytest.fixture(autouse=True)
def tasks_queue(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE}


def cancelled(result) -> bool:
    result.refresh()
    return result.status == TaskResultStatus.FAILED and result.errors[-1].exception_class_path == CANCELLED


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_cancel_from_code_makes_a_waiting_task_failed_with_who_and_why_and_leaves_a_trail():
    result = tasks.insert_row.enqueue("never")
    nightjar_tasks.cancel(result, actor="billing job", reason="the invoice was voided")
    assert cancelled(result)
    assert "billing job" in result.errors[-1].traceback and "the invoice was voided" in result.errors[-1].traceback
    trail = TaskStaffAction.objects.get(task_id=int(result.id))
    assert (trail.actor, trail.action, trail.detail) == ("billing job", "cancel", "the invoice was voided")


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_a_task_that_ran_or_is_parked_or_not_atomic_is_not_cancelled_and_the_refusal_says_why():
    done = tasks.add.enqueue(1, 2)
    TaskRecord.objects.filter(pk=int(done.id)).update(status=TaskResultStatus.SUCCESSFUL)
    parked = tasks.add.enqueue(3, 4)
    TaskParked.objects.create(task_id=int(parked.id), reason="The worker died while handling it", attempts=20)
    outside = tasks.insert_row_outside.enqueue("x")
    for result, why in ((done, "SUCCESSFUL"), (parked, "parked"), (outside, "atomic=False")):
        with pytest.raises(nightjar_tasks.CannotCancel, match=why):
            nightjar_tasks.cancel(result, actor="test")
    with pytest.raises(nightjar_tasks.CannotCancel, match="no task 12"):
        nightjar_tasks.cancel("12", actor="test")
    assert not TaskStaffAction.objects.exists()


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_the_command_cancels_each_id_and_fails_on_a_refusal(capsys):
    waiting = tasks.add.enqueue(1, 2)
    done = tasks.add.enqueue(3, 4)
    TaskRecord.objects.filter(pk=int(done.id)).update(status=TaskResultStatus.SUCCESSFUL)
    with pytest.raises(CommandError) as refused:
        call_command("nightjar_cancel_task", waiting.id, done.id, "--reason", "not needed")
    assert refused.value.returncode == 1
    assert f"Cancelled task {waiting.id}." in capsys.readouterr().out
    assert cancelled(waiting) and not cancelled(done)
    trail = TaskStaffAction.objects.get(task_id=int(waiting.id))
    assert trail.actor.endswith("(manage.py nightjar_cancel_task)") and trail.detail == "not needed"


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_the_admin_s_cancel_needs_its_permission_shows_a_plan_then_cancels_with_a_trail(client):
    waiting, done = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
    TaskRecord.objects.filter(pk=int(done.id)).update(status=TaskResultStatus.SUCCESSFUL)
    clerk = User.objects.create_user("clerk", password="x", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_taskrecord"))
    client.force_login(clerk)
    changelist = "/admin/nightjar_tasks/taskrecord/"
    chosen = {"action": "cancel", "_selected_action": [waiting.id, done.id]}
    assert 'value="cancel"' not in client.get(changelist).content.decode()  # no permission: no action
    clerk.user_permissions.add(Permission.objects.get(codename="cancel_taskrecord"))
    clerk = User.objects.get(pk=clerk.pk)
    client.force_login(clerk)
    plan = client.post(changelist, chosen).content.decode()
    assert f"task {waiting.id}" in plan and "Not waiting to run, left alone:" in plan
    assert not cancelled(waiting)  # the plan changes nothing
    client.post(changelist, {**chosen, "confirm": "cancel", "reason": "a duplicate"})
    assert cancelled(waiting) and not cancelled(done)
    trail = TaskStaffAction.objects.get(task_id=int(waiting.id))
    assert (trail.actor, trail.action, trail.detail) == ("clerk (admin)", "cancel", "a duplicate")


def cancel_in_a_thread(result) -> tuple[threading.Thread, list]:
    """cancel() from another connection, which waits for the worker's transaction (its lock)."""
    outcome = []

    def run():
        try:
            nightjar_tasks.cancel(result, actor="test")
            outcome.append("cancelled")
        except nightjar_tasks.CannotCancel as error:
            outcome.append(str(error))
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@MODES
@pytest.mark.broker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_worker_holds_the_claimed_task_loses_and_the_task_runs_once(mode, workers):
    result = tasks.insert_row.enqueue("ran")
    worker = workers.start(*TASKS, *mode, "--pause", "inside-transaction")
    worker.wait_for("Paused inside-transaction.")
    thread, outcome = cancel_in_a_thread(result)  # waits for the worker's commit
    thread.join(timeout=1)
    worker.send("")
    thread.join(timeout=30)
    worker.finish()
    assert outcome and "SUCCESSFUL" in outcome[0]
    assert list(Group.objects.values_list("name", flat=True)) == ["ran"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


@MODES
@pytest.mark.broker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cancel_just_before_the_worker_claims_the_task_wins_and_the_task_never_runs(mode, workers):
    result = tasks.insert_row.enqueue("never")
    worker = workers.start(*TASKS, *mode, "--pause", "before-write")
    worker.wait_for("Paused before-write.")  # received and read as READY: the claim comes next
    nightjar_tasks.cancel(result, actor="test")
    worker.send("")
    worker.finish()
    assert not Group.objects.exists()
    assert cancelled(result)
    assert workers.run(*TASKS).stdout.strip() == "No ready tasks"  # acked: nothing is left


@pytest.mark.broker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_holding_the_task_lets_the_waiting_cancel_win_and_its_redelivery_runs_nothing(workers):
    result = tasks.insert_row.enqueue("never")
    worker = workers.start(*TASKS, "--pause", "inside-transaction")
    worker.wait_for("Paused inside-transaction.")
    thread, outcome = cancel_in_a_thread(result)  # waits for the worker's transaction
    thread.join(timeout=1)
    worker.signal(signal.SIGKILL)  # its transaction rolls back: the cancel goes through
    worker.finish()
    thread.join(timeout=30)
    assert outcome == ["cancelled"]
    rerun = workers.run(*TASKS)  # the broker redelivers the killed worker's delivery
    assert f"Received task {result.id} redelivered=True" in rerun.stdout
    assert not Group.objects.exists()
    assert cancelled(result)


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_a_cancelled_task_keeps_its_completion_key_so_a_claim_runs_nothing_and_the_audit_passes():
    from nightjar_tasks import marks, summary

    result = tasks.insert_row.enqueue("never")
    nightjar_tasks.cancel(result, actor="test")
    assert marks.insert_keys([int(result.id)]) == set()  # a worker's claim, per delivery or batch: not new
    assert summary.audit() == []


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
def test_a_failed_attempt_recorded_after_a_cancel_leaves_the_task_cancelled():
    from nightjar_tasks import attempts

    result = tasks.insert_when_fixed.enqueue("x")
    record = TaskRecord.objects.get(pk=int(result.id))
    nightjar_tasks.cancel(result, actor="test")  # between the attempt's rollback and its record
    attempts.record_failure(record, RuntimeError("x is not fixed yet"), record.enqueued_at, "w:1")
    assert cancelled(result) and result.attempts == 1
    assert [error.exception_class_path for error in result.errors] == ["builtins.RuntimeError", CANCELLED]
