"""Tasks on the operator's surfaces: the per-task-path totals (nightjar_tasks
summary) and the desk's Prometheus scrape. Rows as the backend's enqueue
writes them; the worker's outcome written onto them (no broker here: the
worker's own path is proven in the broker tier)."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from nightjar_tasks import summary
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskCompletion, TaskParked, TaskRecord
from tests.test_desk import samples

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

pytestmark = [pytest.mark.fast, pytest.mark.django_db]


@task()
def send_reminder(name: str) -> str:
    return name


@task()
def resize_photo(number: int) -> int:
    return number


def finish(result, status: str, *, seconds: float) -> TaskRecord:
    """What the worker writes when a task ends: its status and finish time (and, done, its completion key)."""
    record = TaskRecord.objects.get(pk=result.id)
    record.status, record.finished_at = status, record.enqueued_at + timedelta(seconds=seconds)
    record.save()
    if status == TaskResultStatus.SUCCESSFUL:
        TaskCompletion.objects.create(task=record)
    return record


@pytest.fixture
def tasks():
    """Per path: send_reminder 2 done (1 s and 3 s), 1 failed and parked, 1 waiting; resize_photo 1 waiting."""
    finish(send_reminder.enqueue("Mina"), TaskResultStatus.SUCCESSFUL, seconds=1)
    finish(send_reminder.enqueue("Ravi"), TaskResultStatus.SUCCESSFUL, seconds=3)
    failed = finish(send_reminder.enqueue("Ada"), TaskResultStatus.FAILED, seconds=2)
    TaskParked.objects.create(task=failed, reason="ValueError: no address", attempts=3, body_sha256="0" * 64)
    send_reminder.enqueue("Lin")
    resize_photo.enqueue(7)
    return f"{__name__}.send_reminder", f"{__name__}.resize_photo"


def test_each_task_path_counts_enqueued_done_failed_parked_waiting_and_latency(tasks):
    reminder, photo = tasks
    rows = {row.task_path: row for row in summary.by_task_path()}
    assert set(rows) == {reminder, photo}
    assert rows[reminder] == summary.TaskPath(
        task_path=reminder, enqueued=4, done=2, failed=1, waiting=1, parked=1, latency_seconds=4.0
    )
    assert rows[reminder].average_latency == 2.0
    assert (rows[photo].enqueued, rows[photo].waiting, rows[photo].done, rows[photo].average_latency) == (1, 1, 0, None)


def test_a_requeued_task_is_no_longer_counted_parked(tasks):
    reminder, _ = tasks
    TaskParked.objects.update(resolution=TaskParked.REQUEUED, resolved_by="staff", resolved_at=timezone.now())
    assert {row.task_path: row.parked for row in summary.by_task_path()}[reminder] == 0


def test_the_desk_s_metrics_have_each_task_path_s_totals_and_latency(tasks, staff):
    reminder, photo = tasks
    scraped = samples(staff.get("/metrics").content.decode())
    by = (("task_path", reminder),)
    assert scraped[("nightjar_tasks_enqueued", by)] == 4
    assert scraped[("nightjar_tasks_done", by)] == 2
    assert scraped[("nightjar_tasks_failed", by)] == 1
    assert scraped[("nightjar_tasks_parked", by)] == 1
    assert scraped[("nightjar_tasks_waiting", by)] == 1
    assert scraped[("nightjar_task_latency_seconds_count", by)] == 2
    assert scraped[("nightjar_task_latency_seconds_sum", by)] == 4.0
    assert scraped[("nightjar_tasks_waiting", (("task_path", photo),))] == 1
    # The registrations' gauges are still there, unchanged.
    assert ("nightjar_registrations_pending", ()) in scraped


def test_the_desk_lists_each_task_path_with_its_totals(tasks, staff):
    reminder, photo = tasks
    page = staff.get("/admin/tickets/registration/delivery-status/").content.decode()
    assert "<h2>Tasks</h2>" in page
    row = (
        f"<tr><td>{reminder}</td><td>4</td><td>2</td><td>1</td>\n"
        '      <td class="desk-warn">1</td><td>1</td><td>0</td>\n      <td class="">0</td>\n      <td>2.000 s</td></tr>'
    )
    assert row in page
    assert f"<tr><td>{photo}</td><td>1</td><td>0</td><td>0</td>" in page


def test_the_desk_has_no_tasks_block_without_tasks(staff):
    assert "<h2>Tasks</h2>" not in staff.get("/admin/tickets/registration/delivery-status/").content.decode()


def test_tasks_status_prints_each_task_path_the_totals_and_the_queue(tasks):
    reminder, photo = tasks
    out = io.StringIO()
    call_command("nightjar_tasks_status", stdout=out)
    lines = out.getvalue().splitlines()
    width = len(reminder)
    assert lines[0] == (
        f"{photo:<{width}}  enqueued=1  done=0  failed=0  parked=0  waiting=1 (scheduled=0, lost=0)  average latency -"
    )
    assert (
        lines[1]
        == f"{reminder}  enqueued=4  done=2  failed=1  parked=1  waiting=1 (scheduled=0, lost=0)  average latency 2.000 s"
    )
    assert lines[2] == "Tasks: 5  done: 2  failed: 1  parked: 1 (see `nightjar_parked --channel tasks`)  waiting: 2"
    assert (
        lines[3] == "Audit passed: every SUCCESSFUL task has its completion key, and only those (and cancelled ones)."
    )
    assert lines[4].startswith("Queue nightjar.tasks: ") and lines[4].endswith("dead-lettered")


def test_the_audit_names_a_done_task_without_its_key_and_a_key_on_an_unfinished_task(tasks):
    reminder, photo = tasks
    done = TaskRecord.objects.filter(task_path=reminder, status=TaskResultStatus.SUCCESSFUL).first()
    TaskCompletion.objects.filter(task=done).delete()
    waiting = TaskRecord.objects.get(task_path=photo)
    TaskCompletion.objects.create(task=waiting)
    assert summary.audit() == [
        f"task {done.pk} ({reminder}) is SUCCESSFUL without its completion key",
        f"task {waiting.pk} ({photo}) has a completion key but is READY",
    ]
    with pytest.raises(CommandError, match=r"Audit failed: 2 task\(s\) break the promise"):
        call_command("nightjar_tasks_status", stdout=io.StringIO())


def test_tasks_status_without_tasks_says_so():
    out = io.StringIO()
    call_command("nightjar_tasks_status", stdout=out)
    assert out.getvalue().splitlines()[0] == "No tasks enqueued yet."
