"""One way to park, one way to requeue (nightjar_delivery/recording.py park,
nightjar_delivery/reconcile.py requeue_parked): the dead-letter collector's
republishes after interruptions are counted by the parked record's own
field (not by who it names as resolver); a staff requeue leaves its trail
and calls the channel's on_requeue hook, where the tasks make a failed task
ready again; the staff trail itself changes nothing."""

import pytest

from nightjar_delivery import channel, reconcile, recording, transport
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord, TaskStaffAction
from tickets import contract
from tickets.models import ParkedDelivery, StaffAction
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]


def dead_letter(registration) -> None:
    transport.publish_raw([contract.encode(registration_id=registration.pk, name=registration.name)], dead=True)


def test_the_collectors_republish_is_counted_by_its_field_not_by_a_name():
    registrations = channel.get("registrations")
    registration = register_guest(name="Often Interrupted")
    # A staff member who happens to sign as the collector is not one of its republishes.
    ParkedDelivery.objects.create(
        registration=registration,
        reason="by hand",
        body_sha256="",
        resolution=ParkedDelivery.REQUEUED,
        resolved_by=recording.COLLECTOR,
    )
    dead_letter(registration)
    report = reconcile.collect_dead_letters(registrations)
    assert report.requeued == [registration.code] and report.parked == []
    republished = ParkedDelivery.objects.get(automatic_requeue=True)
    assert (republished.resolution, republished.resolved_by) == (ParkedDelivery.REQUEUED, recording.COLLECTOR)

    dead_letter(registration)  # interrupted again: REPUBLISHES_AFTER_INTERRUPTIONS (1) used, so parked
    report = reconcile.collect_dead_letters(registrations)
    assert report.parked == [registration.code] and report.requeued == []
    assert ParkedDelivery.objects.filter(resolution="", automatic_requeue=False).count() == 1
    assert not StaffAction.objects.filter(action="requeue").exists()  # nobody on the staff trail


def test_a_staff_requeue_leaves_its_trail_and_calls_the_channels_hook(monkeypatch):
    registrations = channel.get("registrations")
    registration = register_guest(name="Parked Once")
    with pytest.raises(Exception, match="is not parked"):
        reconcile.requeue_parked(registrations, registration, actor="staff")
    dead_letter(registration)
    reconcile.collect_dead_letters(registrations)  # republished once,
    dead_letter(registration)
    reconcile.collect_dead_letters(registrations)  # then parked
    called = []
    monkeypatch.setattr(type(registrations), "on_requeue", lambda self, intent: called.append(intent.pk))
    assert reconcile.requeue_parked(registrations, registration, actor="desk (admin)") == registration
    assert called == [registration.pk]
    (trail,) = StaffAction.objects.filter(action="requeue")
    assert (trail.actor, trail.registration_id, trail.detail) == (
        "desk (admin)",
        registration.pk,
        "Requeued a parked delivery.",
    )
    assert not ParkedDelivery.objects.holding().exists()


def test_the_tasks_reset_a_failed_task_in_on_requeue_not_in_their_staff_trail(settings):
    from tests.task_functions import add

    settings.NIGHTJAR_TASKS_QUEUE = f"{settings.NIGHTJAR_QUEUE}.tasks"
    tasks = channel.get("tasks")
    record = TaskRecord.objects.get(pk=add.enqueue(1, 2).id)
    TaskRecord.objects.filter(pk=record.pk).update(status=TaskResultStatus.FAILED, attempts=3)
    record.refresh_from_db()
    recording.park(record, reason="failed 3 times", attempts=3, excerpt=record.task_path, channel=tasks)

    tasks.record_staff_action(actor="staff", action="requeue", intent=record, detail="only a trace")
    assert TaskRecord.objects.get(pk=record.pk).status == TaskResultStatus.FAILED  # the trail is only a trail

    reconcile.requeue_parked(tasks, record, actor="staff")
    row = TaskRecord.objects.get(pk=record.pk)
    assert (row.status, row.requeued_at_attempt, row.finished_at) == (TaskResultStatus.READY, 3, None)
    assert TaskParked.objects.get().resolution == TaskParked.REQUEUED
    assert list(TaskStaffAction.objects.values_list("action", flat=True).order_by("id")) == ["requeue", "requeue"]
