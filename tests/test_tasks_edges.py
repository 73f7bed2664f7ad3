"""The Tasks backend at its edges: bodies on the queue that must not break
anything, ids nobody can reuse or guess, an enqueue that is exactly once by
key, and what staff see of it. Fast tests on the in-memory transport (the
worker loop in this process); the broker tests at the end prove the same
with real processes on a real broker."""

import io
import json
import math
import subprocess
import sys
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from nightjar_delivery import channel, transport
from nightjar_delivery import reconcile as engine
from nightjar_delivery.codec import ContractError
from nightjar_tasks import enqueue_once, messages, publishing
from nightjar_tasks.backend import EnqueueKeyConflict
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskFailure, TaskParked, TaskRecord, TaskRejectedMessage
from tests import task_functions as tasks
from tests.test_tasks_fast import drain, ready  # the worker loop in this process; a queue's ready count

HUGE = b'{"path": "tests.task_functions.add", "task": 99999999999999999999999999999}'


@pytest.fixture(autouse=True)
def tasks_channel(settings):
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own per test
    chosen = channel.select("tasks")
    yield chosen
    channel.select(None)


@pytest.fixture
def worker_env(worker_env, settings):
    return {**worker_env, "NIGHTJAR_TASKS_QUEUE": settings.NIGHTJAR_TASKS_QUEUE}


def lost_publish(task, *args) -> TaskRecord:
    """A task stored whose publish was lost five minutes ago (as when the broker refused it)."""
    return TaskRecord.objects.create(
        task_path=task.module_path, args=list(args), published_at=timezone.now() - timedelta(minutes=5)
    )


# -- bodies on the queue --


@pytest.mark.fast
@given(st.integers())
def test_a_body_names_a_task_id_only_within_the_bound_the_hint_and_the_decoder_share(task_id):
    body = json.dumps({"path": "p.q", "task": task_id}).encode()
    hinted = messages.hinted_ids([body])
    try:
        decoded = messages.decode(body).task_id
    except ContractError:
        decoded = None
    assert decoded == (task_id if 1 <= task_id <= messages.MAX_TASK_ID else None)
    assert hinted <= {task_id} and all(found <= messages.MAX_TASK_ID for found in hinted)


@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_task_id_too_large_for_the_database_is_a_rejected_body_not_a_failure(tasks_channel, batch):
    transport.publish_raw([HUGE], queue=tasks_channel.queue)
    drain(batch)
    (rejected,) = TaskRejectedMessage.objects.all()
    assert "at most 18 digits" in rejected.reason
    assert not TaskFailure.objects.exists()
    assert ready(tasks_channel.queue) == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_dead_letter_collection_records_a_body_it_cannot_use_and_reconcile_still_publishes(tasks_channel):
    lost = lost_publish(tasks.add, 2, 3)
    transport.publish_raw([HUGE, b"\xff not json", b"[]"], dead=True, queue=tasks_channel.queue)
    report = engine.reconcile(tasks_channel, older_than=60, actor="test")
    assert report.collected.rejected == 3
    assert report.published == [f"task {lost.pk}"]
    drain()
    assert tasks.add.get_result(str(lost.pk)).return_value == 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_dead_lettered_task_is_published_once_by_one_reconcile_pass(tasks_channel):
    lost = lost_publish(tasks.add, 1, 1)
    transport.publish_raw([messages.encode(lost.pk, lost.task_path)], dead=True, queue=tasks_channel.queue)
    report = engine.reconcile(tasks_channel, older_than=60, actor="test")
    assert report.collected.requeued == [f"task {lost.pk}"]
    assert report.published == []  # the collection published it: not again in the same pass
    assert ready(tasks_channel.queue) == 1
    drain()
    assert tasks.add.get_result(str(lost.pk)).return_value == 2
    assert TaskParked.objects.filter(task=lost).count() == 1  # the collection's own note, resolved


@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_message_for_a_task_not_yet_due_does_not_run_it(tasks_channel, batch):
    deferred = tasks.insert_row.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("later")
    publishing.publish(TaskRecord.objects.get(pk=deferred.id))  # injected: before its time
    drain(batch)
    assert not Group.objects.filter(name="later").exists()
    assert tasks.insert_row.get_result(deferred.id).status == TaskResultStatus.READY
    assert "not due until" in TaskRejectedMessage.objects.get().reason
    TaskRecord.objects.filter(pk=deferred.id).update(run_after=timezone.now() - timedelta(seconds=1))
    assert engine.reconcile(tasks_channel, older_than=60, actor="test").published == [f"task {deferred.id}"]
    drain(batch)
    assert Group.objects.filter(name="later").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_message_for_a_task_waiting_out_its_backoff_does_not_run_it(tasks_channel):
    failing = tasks.insert_when_fixed.enqueue("slow")
    drain()  # its first attempt fails (not fixed yet): READY again, after its backoff
    row = TaskRecord.objects.get(pk=failing.id)
    assert row.attempts == 1 and row.status == TaskResultStatus.READY
    TaskRecord.objects.filter(pk=failing.id).update(run_after=timezone.now() + timedelta(hours=1))
    Group.objects.create(name="fixed-slow")
    publishing.publish(row)
    drain()
    assert TaskRecord.objects.get(pk=failing.id).attempts == 1  # not run again before its time
    assert not Group.objects.filter(name="slow").exists()


def _due_and_published_again(pk: int) -> None:
    """Its backoff over now, published again (what reconcile does when it is due)."""
    TaskRecord.objects.filter(pk=pk).update(run_after=timezone.now() - timedelta(seconds=1))
    publishing.publish(TaskRecord.objects.get(pk=pk))


@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_task_whose_code_cannot_be_imported_is_retried_with_backoff_and_runs_once_it_imports(
    tasks_channel, batch, monkeypatch
):
    """Issue 51: a release that renames a task, workers first, left the old
    web processes enqueueing the old path, and each such task was FAILED and
    parked at its first attempt. An ImportError is a failure like any other:
    retried after the backoff, within the backend's attempts."""
    renamed = TaskRecord.objects.create(task_path="tests.task_functions.add_renamed", args=[1, 2])
    publishing.publish(renamed)
    drain(batch)
    row = TaskRecord.objects.get(pk=renamed.pk)
    assert (row.status, row.attempts) == (TaskResultStatus.READY, 1)
    assert row.run_after is not None and row.published_at is None  # reconcile publishes it when due
    assert row.errors[0]["exception_class_path"].endswith("ImportError")
    assert "add_renamed" in row.errors[0]["traceback"]
    assert not TaskParked.objects.filter(task=renamed).exists()
    monkeypatch.setattr(tasks, "add_renamed", tasks.add, raising=False)  # the release that brings it back
    _due_and_published_again(renamed.pk)
    drain(batch)
    row = TaskRecord.objects.get(pk=renamed.pk)
    assert (row.status, row.return_value, row.attempts, len(row.errors)) == (TaskResultStatus.SUCCESSFUL, 3, 2, 1)


@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_task_whose_code_never_comes_back_fails_at_its_attempts_with_its_import_error(tasks_channel, batch):
    gone = TaskRecord.objects.create(task_path="tests.task_functions_removed.add", args=[1, 2])
    publishing.publish(gone)
    drain(batch)
    for _ in range(2):  # the backend's max_attempts: 3
        _due_and_published_again(gone.pk)
        drain(batch)
    row = TaskRecord.objects.get(pk=gone.pk)
    assert row.status == TaskResultStatus.FAILED and row.attempts == 3
    assert row.errors[-1]["exception_class_path"].endswith("ModuleNotFoundError")
    assert "tests.task_functions_removed" in row.errors[-1]["traceback"]
    assert TaskParked.objects.filter(task=gone, resolution="").count() == 1
    assert ready(tasks_channel.queue) == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_parked_task_is_not_counted_as_a_lost_publish(tasks_channel):
    """Issue 51: a task the engine parked while READY (before this issue's
    fix, a task parked for its worker's deaths stayed so) waits for staff,
    not for reconcile: nightjar_tasks_status must not call it lost forever."""
    long_ago = timezone.now() - timedelta(hours=2)
    parked = TaskRecord.objects.create(task_path="tests.task_functions.die", args=[1], enqueued_at=long_ago)
    TaskRecord.objects.filter(pk=parked.pk).update(published_at=long_ago)
    TaskParked.objects.create(task=parked, reason="The worker died while handling it", attempts=2)
    lost = TaskRecord.objects.create(task_path="tests.task_functions.add", args=[1, 1], enqueued_at=long_ago)
    TaskRecord.objects.filter(pk=lost.pk).update(published_at=long_ago)
    out = io.StringIO()
    call_command("nightjar_tasks_status", stdout=out)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("tests.task_functions.die") and "lost=0" in line for line in lines), lines
    assert any(line.startswith("tests.task_functions.add") and "lost=1" in line for line in lines), lines


# -- enqueue --


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nul\x00", "lone \ud800", {"k": ["\x00"]}])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_enqueue_refuses_nan_and_infinity_before_any_sql(value, tasks_channel):
    with transaction.atomic():
        with pytest.raises(ValueError, match="NaN and infinity|storable text"):
            tasks.add.enqueue(value, 1)
        Group.objects.create(name="the caller's own write")  # its transaction is unharmed
    assert Group.objects.filter(name="the caller's own write").exists()
    assert not TaskRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_result_ids_are_never_reused_and_not_sequential(tasks_channel):
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.add.enqueue(1, 1).id
        raise RuntimeError("the caller changed its mind")
    ids = [int(tasks.add.enqueue(1, n).id) for n in range(20)]
    assert str(rolled_back) not in map(str, ids)
    assert len(set(ids)) == 20
    assert all(1 <= pk <= messages.MAX_TASK_ID for pk in ids)
    assert sorted(ids) != list(range(min(ids), min(ids) + 20))  # not a sequence anyone can walk


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_an_enqueue_key_makes_the_same_work_one_task(tasks_channel):
    first = enqueue_once(tasks.insert_row, "visit-42", "forty-two")
    again = enqueue_once(tasks.insert_row, "visit-42", "forty-two")
    assert again.id == first.id
    assert TaskRecord.objects.count() == 1 and ready(tasks_channel.queue) == 1
    with pytest.raises(EnqueueKeyConflict, match="visit-42"):
        enqueue_once(tasks.insert_row, "visit-42", "forty-three")
    with pytest.raises(EnqueueKeyConflict):
        enqueue_once(tasks.add, "visit-42", 1, 2)
    drain()
    assert enqueue_once(tasks.insert_row, "visit-42", "forty-two").status == TaskResultStatus.SUCCESSFUL
    assert Group.objects.filter(name="forty-two").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_an_enqueue_key_is_stored_in_the_caller_s_transaction(tasks_channel):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_once(tasks.add, "sum", 1, 2)
        assert enqueue_once(tasks.add, "sum", 1, 2).id  # the same transaction sees its own key
        raise RuntimeError("rolled back")
    assert not TaskRecord.objects.exists()
    assert enqueue_once(tasks.add, "sum", 1, 2).args == [1, 2]  # the key is free again


@pytest.mark.parametrize("key", ["", "x" * 201, "nul\x00", "\ud800", 42])
@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_an_enqueue_key_that_cannot_be_stored_is_refused_before_any_sql(key, tasks_channel):
    with transaction.atomic():
        with pytest.raises((ValueError, TypeError), match="enqueue key"):
            enqueue_once(tasks.add, key, 1, 2)
        Group.objects.create(name="unharmed")
    assert not TaskRecord.objects.exists()


# -- real processes --

ENQUEUE_AT_ONCE = """
import sys, time
from django.db import transaction
from nightjar_tasks import enqueue_once
from tests.task_functions import insert_row
with transaction.atomic():
    result = enqueue_once(insert_row, "one-key", "once")
    print(result.id, flush=True)
    time.sleep(1)  # the other process's enqueue of the same key overlaps this transaction
"""


@pytest.mark.broker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_processes_enqueueing_one_key_at_once_make_one_task_and_one_effect(workers, worker_env):
    env = worker_env
    manage = [sys.executable, "manage.py", "shell", "-c", ENQUEUE_AT_ONCE]
    both = [
        subprocess.Popen(manage, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in (1, 2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in both]
    assert [proc.returncode for proc in both] == [0, 0], outputs
    ids = {out.strip().splitlines()[-1] for out, _ in outputs}
    assert len(ids) == 1  # both were given the one task
    ran = workers.run("--channel", "tasks", "--drain")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert TaskRecord.objects.count() == 1
    assert Group.objects.filter(name="once").count() == 1


@pytest.mark.broker
@pytest.mark.django_db(transaction=True)
def test_a_huge_task_id_on_the_queue_and_in_its_dead_letters_never_stops_reconcile(workers, worker_env, tasks_channel):
    queue = tasks_channel.queue
    transport.publish_raw([HUGE], queue=queue)
    # (another body: the same bytes redelivered are one rejected record, whatever the broker)
    transport.publish_raw([HUGE.replace(b"999}", b"998}")], dead=True, queue=queue)
    lost = lost_publish(tasks.add, 20, 22)
    env = worker_env
    drained = workers.run("--channel", "tasks", "--drain")
    assert drained.returncode == 0 and "Rejected" in drained.stdout, drained.stdout + drained.stderr
    done = subprocess.run(
        [sys.executable, "manage.py", "reconcile", "--channel", "tasks", "--older-than", "60"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"task {lost.pk}" in done.stdout
    workers.run("--channel", "tasks", "--drain")
    assert tasks.add.get_result(str(lost.pk)).return_value == 42
    assert TaskRejectedMessage.objects.count() == 2, (drained.stdout, done.stdout)  # the queue's and the dead letter's


# -- what staff and operators see --


def parked_task(name: str) -> TaskRecord:
    """A task that failed its last attempt and waits for staff, as the runner leaves one."""
    record = TaskRecord.objects.create(
        task_path=tasks.insert_row.module_path,
        args=[name],
        status=TaskResultStatus.FAILED,
        attempts=3,
        errors=[
            {"exception_class_path": "builtins.RuntimeError", "traceback": "Traceback ...\nRuntimeError: <b>no</b>"}
        ],
        worker_ids=["host:1", "host:2", "host:3"],
        finished_at=timezone.now(),
    )
    TaskParked.objects.create(task=record, reason="RuntimeError: no", attempts=3, body_sha256="")
    return record


def staff_with(client, *codenames: str, name: str = "door-keeper"):
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="nightjar_tasks", codename__in=codenames)
    )
    client.force_login(user)
    return client


CHANGELIST = "/admin/nightjar_tasks/taskrecord/"


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_the_tasks_admin_lists_filters_searches_and_shows_a_task_read_only(client, tasks_channel):
    parked = parked_task("stuck")
    done = tasks.add.enqueue(1, 2)
    viewer = staff_with(client, "view_taskrecord")
    page = viewer.get(CHANGELIST).content.decode()
    assert str(parked.pk) in page and done.id in page
    assert done.id not in viewer.get(CHANGELIST + "?parked=yes").content.decode()
    assert done.id not in viewer.get(CHANGELIST + "?status__exact=FAILED").content.decode()
    found = viewer.get(CHANGELIST, {"q": str(parked.pk)}).content.decode()
    assert str(parked.pk) in found and done.id not in found
    assert viewer.get(CHANGELIST, {"q": "9" * 40}).status_code == 200  # a number no id can be: nothing found
    detail = viewer.get(f"{CHANGELIST}{parked.pk}/change/").content.decode()
    assert "RuntimeError: &lt;b&gt;no&lt;/b&gt;" in detail  # the traceback, escaped
    assert "host:1, host:2, host:3" in detail and "&quot;stuck&quot;" in detail
    assert 'name="_save"' not in detail  # read-only


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_viewer_cannot_requeue_or_discard_and_each_action_has_its_own_permission(client, tasks_channel):
    parked = parked_task("stuck")
    viewer = staff_with(client, "view_taskrecord")
    listed = viewer.get(CHANGELIST).content.decode()
    assert 'value="requeue"' not in listed and 'value="discard"' not in listed
    refused = viewer.post(CHANGELIST, {"action": "requeue", "_selected_action": [parked.pk], "confirm": "requeue"})
    assert refused.status_code in (200, 302, 403)
    assert TaskParked.objects.get(task=parked).resolution == ""
    discarder = staff_with(client, "view_taskrecord", "discard_taskrecord", name="discarder")
    listed = discarder.get(CHANGELIST).content.decode()
    assert 'value="discard"' in listed and 'value="requeue"' not in listed
    response = discarder.post(CHANGELIST, {"action": "requeue", "_selected_action": [parked.pk], "confirm": "requeue"})
    assert TaskParked.objects.get(task=parked).resolution == ""  # requeue needs its own permission
    assert response.status_code in (200, 302)


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_requeue_in_the_admin_shows_its_plan_then_runs_the_task_again_with_a_trail(client, tasks_channel):
    from nightjar_tasks.models import TaskStaffAction

    parked = parked_task("again")
    other = tasks.add.enqueue(2, 2)
    staff = staff_with(client, "view_taskrecord", "requeue_taskrecord")
    plan = staff.post(CHANGELIST, {"action": "requeue", "_selected_action": [parked.pk, other.id]})
    text = plan.content.decode()
    assert f"task {parked.pk} (tests.task_functions.insert_row): run again" in text
    assert f"task {other.id} (tests.task_functions.add, READY)" in text  # not parked: named, left alone
    assert TaskParked.objects.get(task=parked).resolution == ""  # nothing before the confirmation
    staff.post(CHANGELIST, {"action": "requeue", "_selected_action": [parked.pk, other.id], "confirm": "requeue"})
    assert TaskParked.objects.get(task=parked).resolution == TaskParked.REQUEUED
    (trail,) = TaskStaffAction.objects.all()
    assert (trail.actor, trail.action, trail.task_id) == ("door-keeper (admin)", "requeue", parked.pk)
    drain()
    assert Group.objects.filter(name="again").count() == 1
    assert TaskRecord.objects.get(pk=parked.pk).status == TaskResultStatus.SUCCESSFUL


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_discard_confirmed_after_another_staff_requeued_the_task_says_there_was_nothing_left(client, tasks_channel):
    parked = parked_task("meanwhile")
    staff = staff_with(client, "view_taskrecord", "discard_taskrecord", "requeue_taskrecord")
    chosen = {"action": "discard", "_selected_action": [parked.pk]}
    assert "give up on" in staff.post(CHANGELIST, chosen).content.decode()  # the plan
    engine.requeue_parked(tasks_channel, parked, actor="someone else (admin)")
    told = staff.post(CHANGELIST, {**chosen, "confirm": "discard"}, follow=True).content.decode()
    assert "None of the selected tasks is parked: there is nothing to discard." in told
    assert f"Not parked, left alone: task {parked.pk} (tests.task_functions.insert_row" in told
    assert TaskParked.objects.get(task=parked).resolution == TaskParked.REQUEUED


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_discard_in_the_admin_gives_up_on_a_parked_task_with_a_trail(client, tasks_channel):
    from nightjar_tasks.models import TaskStaffAction

    parked = parked_task("never")
    staff = staff_with(client, "view_taskrecord", "discard_taskrecord")
    assert (
        "give up on" in staff.post(CHANGELIST, {"action": "discard", "_selected_action": [parked.pk]}).content.decode()
    )
    staff.post(CHANGELIST, {"action": "discard", "_selected_action": [parked.pk], "confirm": "discard"})
    assert TaskParked.objects.get(task=parked).resolution == TaskParked.DISCARDED
    assert TaskStaffAction.objects.get().action == "discard"
    assert TaskRecord.objects.get(pk=parked.pk).status == TaskResultStatus.FAILED


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_tasks_status_and_the_desk_tell_a_lost_publish_from_a_task_waiting_for_its_time(tasks_channel, staff):
    from django.core.management import call_command

    from nightjar_tasks import summary

    lost_publish(tasks.add, 1, 1)
    tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(2, 2)
    tasks.add.enqueue(3, 3)  # just published: neither
    (row,) = summary.by_task_path()
    assert (row.waiting, row.scheduled, row.lost) == (3, 1, 1)
    out = io.StringIO()
    call_command("nightjar_tasks_status", stdout=out)
    assert "waiting=3 (scheduled=1, lost=1)" in out.getvalue()
    assert "Lost publishes: 1 task(s)" in out.getvalue()
    desk = staff.get("/admin/tickets/registration/delivery-status/").content.decode()
    assert "Lost publishes" in desk and '<td class="desk-warn">1</td>' in desk


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_the_engine_s_commands_speak_the_tasks_channel_s_words_not_the_tickets(tasks_channel):
    """What the engine prints under the tasks channel — its commands' help and
    the parked lines — says task and result, never registration or ticket."""
    from django.core.management import call_command, load_command_class

    printed = []
    for name in ("nightjar_worker", "nightjar_reconcile", "nightjar_parked"):
        command = load_command_class("nightjar_delivery", name)
        command.argv = ["manage.py", name, "--channel", "tasks"]  # as run_from_argv keeps them
        printed.append(command.create_parser("manage.py", name).format_help())
    parked = parked_task("for-words")
    for args in ([], ["collect"], ["requeue", str(parked.pk)], ["discard", str(parked.pk)]):
        out = io.StringIO()
        try:
            call_command("nightjar_parked", "--channel", "tasks", *args, stdout=out)
        except Exception as error:  # a refusal's sentence is printed words too
            printed.append(str(error))
        printed.append(out.getvalue())
    TaskParked.objects.create(task=parked, reason="again", attempts=1, body_sha256="")
    out = io.StringIO()
    call_command("nightjar_parked", "--channel", "tasks", "discard", str(parked.pk), stdout=out)
    printed.append(out.getvalue())
    text = "\n".join(printed)
    assert f"Discarded task {parked.pk}: it stays parked, without its result." in text
    assert "registration" not in text.lower() and "ticket" not in text.lower(), text


@pytest.mark.django_db(transaction=True)
@pytest.mark.fast
def test_a_dead_letter_of_a_task_parked_already_adds_no_second_parked_record(tasks_channel):
    parked = parked_task("parked-once")
    TaskRecord.objects.filter(pk=parked.pk).update(status=TaskResultStatus.READY)  # (not settled: READY again)
    transport.publish_raw([messages.encode(parked.pk, parked.task_path)], dead=True, queue=tasks_channel.queue)
    report = engine.collect_dead_letters(tasks_channel)
    assert (report.dropped, report.parked, report.requeued) == (1, [], [])
    assert TaskParked.objects.filter(task=parked).count() == 1
