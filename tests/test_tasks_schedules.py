"""Periodic tasks declared in settings (NIGHTJAR_TASKS_SCHEDULE): the cron
rule, the slot a scheduler enqueues (the latest one, once: slots missed while
nothing ran are skipped), and two real schedulers making one task per slot."""

import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from nightjar_tasks import schedules
from nightjar_tasks.models import TaskRecord
from tests.conftest import ROOT

HOURLY = {"hourly-add": {"task": "tests.task_functions.add", "every": 3600, "args": [1, 2]}}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("rule", "now", "latest", "following"),
    [
        ("*/15 * * * *", "2026-12-06 10:07:30", "2026-12-06 10:00", "2026-12-06 10:15"),
        ("0 3 * * *", "2026-12-06 02:59:00", "2026-12-05 03:00", "2026-12-06 03:00"),
        ("0 3 * * *", "2026-12-06 03:00:00", "2026-12-06 03:00", "2026-12-07 03:00"),
        ("30 8 * * 1-5", "2026-12-06 12:00:00", "2026-12-04 08:30", "2026-12-07 08:30"),  # the 6th is a Sunday
        ("0 0 1 * 0", "2026-12-03 00:00:00", "2026-12-01 00:00", "2026-12-06 00:00"),  # day 1 OR a Sunday
        ("0 0 29 2 *", "2026-12-06 00:00:00", "2024-02-29 00:00", "2028-02-29 00:00"),
        ("5,10-12 * * 12 7", "2026-12-06 10:11:00", "2026-12-06 10:11", "2026-12-06 10:12"),
    ],
)
def test_a_cron_rule_s_latest_and_next_slot(rule, now, latest, following):
    cron = schedules.Cron(rule)
    assert cron.latest(at(now)) == at(latest)
    assert cron.following(at(now)) == at(following)


@pytest.mark.fast
@pytest.mark.parametrize("rule", ["61 * * * *", "* * * *", "0 0 31 2 *", "*/0 * * * *", "a * * * *", "5-1 * * * *"])
def test_a_cron_rule_that_cannot_be_read_or_never_comes_is_refused(rule):
    with pytest.raises(ValueError):
        schedules.Cron(rule)


@pytest.mark.fast
def test_an_interval_s_slots_are_the_same_for_every_scheduler_however_late_it_starts():
    every = schedules.Schedule.from_setting("x", {"task": "tests.task_functions.add", "every": 600})
    assert every.latest(at("2026-12-06 10:09:59")) == at("2026-12-06 10:00")
    assert every.following(at("2026-12-06 10:09:59")) == at("2026-12-06 10:10")


@pytest.mark.fast
@pytest.mark.django_db(transaction=True)
@override_settings(NIGHTJAR_TASKS_SCHEDULE=HOURLY)
def test_slots_missed_while_nothing_ran_are_skipped_and_the_latest_runs_once():
    assert [slot.key for slot in schedules.enqueue_due(now=at("2026-12-06 10:00:05"))] == [
        "schedule:hourly-add:2026-12-06T10:00:00Z"
    ]
    # Everything down from 10:30 to 13:30: 11:00 and 12:00 are missed, 13:00 runs once.
    assert [slot.key for slot in schedules.enqueue_due(now=at("2026-12-06 13:30:00"))] == [
        "schedule:hourly-add:2026-12-06T13:00:00Z"
    ]
    assert schedules.enqueue_due(now=at("2026-12-06 13:45:00")) == []  # the same slot: nothing more
    keys = sorted(TaskRecord.objects.values_list("enqueue_key", flat=True))
    assert keys == ["schedule:hourly-add:2026-12-06T10:00:00Z", "schedule:hourly-add:2026-12-06T13:00:00Z"]
    assert {tuple(args) for args in TaskRecord.objects.values_list("args", flat=True)} == {(1, 2)}


@pytest.mark.fast
@override_settings(NIGHTJAR_TASKS_SCHEDULE={"bad": {"task": "tests.task_functions.add", "cron": "0 0 31 2 *"}})
def test_a_schedule_setting_that_cannot_run_is_a_system_check_error():
    assert [problem.id for problem in schedules.check_schedules()] == ["nightjar_tasks.E010"]


@pytest.mark.broker
@pytest.mark.django_db(transaction=True)
def test_two_schedulers_running_at_once_make_one_task_per_slot(worker_env, settings):
    queue = f"{settings.NIGHTJAR_QUEUE}.tasks"  # a queue of its own
    env = {**worker_env, "DJANGO_SETTINGS_MODULE": "tests.schedule_settings", "NIGHTJAR_TASKS_QUEUE": queue}
    command = [sys.executable, str(ROOT / "manage.py"), "nightjar_scheduler"]
    both = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in "ab"
    ]

    def until_tasks(count: int) -> None:
        deadline = time.monotonic() + 60
        while TaskRecord.objects.count() < count and time.monotonic() < deadline:
            time.sleep(0.2)

    killed_output = ""
    try:
        until_tasks(3)
        both[0].kill()  # SIGKILL, mid-pass or asleep: the other goes on alone
        killed_output = both[0].communicate(timeout=30)[0]
        until_tasks(TaskRecord.objects.count() + 2)
    finally:
        for process in both:
            if process.poll() is None:
                process.terminate()
        said = [killed_output, both[1].communicate(timeout=30)[0]]
    assert both[1].returncode == 0, said
    keys = list(TaskRecord.objects.values_list("enqueue_key", flat=True))
    assert len(keys) >= 5 and len(set(keys)) == len(keys)  # every slot once
    # Each new by one of the two (the killed one may have died between its commit and its line).
    assert len(keys) - 1 <= sum(text.count("Enqueued") for text in said) <= len(keys)
