"""Written once, in the engine, and used by every app: the read-only admin of
the records (nightjar_delivery.ReadOnlyRecordAdmin), who a staff change is
recorded as (nightjar_delivery.actor), and the channel's gauges (the tasks
say only what they count, not how the gauges are made)."""

import ast
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.utils import timezone

import nightjar_delivery
from nightjar_delivery import ReadOnlyRecordAdmin, actor, channel, recording
from nightjar_tasks.channel import TasksChannel
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskRecord, TaskStaffAction
from tests.task_functions import add
from tickets.models import DeliveryFailure, Redelivery, RejectedMessage, StaffAction, WorkerReport

pytestmark = pytest.mark.fast
ROOT = Path(__file__).resolve().parent.parent


def test_the_records_admins_of_tickets_and_tasks_share_the_engines_read_only_base():
    for model in (RejectedMessage, DeliveryFailure, Redelivery, WorkerReport, StaffAction, TaskRecord, TaskStaffAction):
        model_admin = admin.site._registry[model]
        assert isinstance(model_admin, ReadOnlyRecordAdmin), model.__name__
        request = SimpleNamespace(user=SimpleNamespace(is_active=True, is_staff=True, has_perm=lambda perm: True))
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)


def test_one_spelling_of_who_acted():
    staff = SimpleNamespace(user=SimpleNamespace(get_username=lambda: "anna"))
    assert actor(staff) == "anna (admin)"
    assert actor(staff, where="door") == "anna (door)"
    at_the_command_line = actor(command="parked requeue")
    assert at_the_command_line.endswith(" (manage.py parked requeue)") and "@" in at_the_command_line
    assert channel.get("tasks").actor("x") == channel.get("registrations").actor("x") == actor(command="x")
    assert len(actor(SimpleNamespace(user=SimpleNamespace(get_username=lambda: "a" * 300)))) == 150


def test_without_a_name_for_the_user_the_command_alone(monkeypatch):
    def no_name():
        raise KeyError("getpwuid(): uid not found: 1000")

    monkeypatch.setattr("getpass.getuser", no_name)
    assert actor(command="retry") == "manage.py retry"


def test_no_app_spells_its_actor_itself():
    """Only the engine defines actor(); the apps import it from the public face."""
    found = []
    for app in ("tickets", "nightjar_tasks", "desk", "door", "classroom", "nightjar", "mail"):
        for path in sorted((ROOT / app).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef) and (node.name == "actor" or node.name.endswith("_actor")):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert found == []
    assert nightjar_delivery.actor is actor


@pytest.mark.django_db(transaction=True)
def test_the_tasks_gauges_are_the_engines_counted_over_their_queue(settings):
    assert "gauges" not in TasksChannel.__dict__
    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"
    tasks = channel.get("tasks")
    later = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)  # READY, not yet due
    failed = TaskRecord.objects.get(pk=add.enqueue(2, 3).id)
    TaskRecord.objects.filter(pk=failed.pk).update(status=TaskResultStatus.FAILED)
    recording.park(failed, reason="failed", attempts=1, excerpt=failed.task_path, channel=tasks)
    other_queue = TaskRecord.objects.get(pk=add.enqueue(3, 4).id)
    TaskRecord.objects.filter(pk=other_queue.pk).update(queue_name="elsewhere", status=TaskResultStatus.FAILED)
    recording.park(other_queue, reason="failed", attempts=1, excerpt=other_queue.task_path, channel=tasks)
    gauges = tasks.gauges()
    assert (gauges["pending"], gauges["parked"]) == (1, 1)
    assert TaskRecord.objects.get(pk=later.id).status == TaskResultStatus.READY
