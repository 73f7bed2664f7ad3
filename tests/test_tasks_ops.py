"""Operating the Tasks backend (issue 51): pruning a large table in batches;
the package page's settings block. Fast tier: no broker; the worker's side of each is proven in
tests/test_tasks_broker.py."""

import contextlib
import re
import sqlite3
import tomllib
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from nightjar_delivery import channel
from nightjar_delivery import conf as engine_conf
from nightjar_delivery.management.commands.nightjar_worker import Command as NightjarWorker
from nightjar_tasks import pruning
from nightjar_tasks.backend import NightjarBackend
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskCompletion, TaskFailure, TaskParked, TaskRecord
from tests.helpers import tasks_settings_block

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent

# A stock SQLite build's SQLITE_MAX_VARIABLE_NUMBER (since 3.32); Debian's is higher.
STOCK_SQLITE_VARIABLES = 32766


def old_results(count: int, *, status=TaskResultStatus.SUCCESSFUL, days: int = 40) -> list[int]:
    """count finished rows: one made by the ORM, copied by one INSERT ... SELECT (ids following its own)."""
    finished = timezone.now() - timedelta(days=days)
    first = TaskRecord.objects.create(task_path="tests.task_functions.add", status=status, finished_at=finished)
    if count > 1:
        quote, table = connection.ops.quote_name, TaskRecord._meta.db_table
        columns = [field.column for field in TaskRecord._meta.concrete_fields]
        pk = TaskRecord._meta.pk.column
        chosen = ", ".join(f"{quote(pk)} + n.i" if column == pk else f"t.{quote(column)}" for column in columns)
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "
                f"INSERT INTO {quote(table)} ({', '.join(map(quote, columns))}) "
                f"SELECT {chosen} FROM {quote(table)} t, n WHERE t.{quote(pk)} = %s",
                [count - 1, first.pk],
            )
    return [first.pk + i for i in range(count)]


def test_prune_deletes_more_rows_than_sqlite_binds_in_one_statement_and_keeps_the_rest(capsys):
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, STOCK_SQLITE_VARIABLES)
    pruned = old_results(40_000)
    failed_and_kept = old_results(1, status=TaskResultStatus.FAILED)[0]  # parked: waits for staff
    TaskParked.objects.create(task_id=failed_and_kept, reason="x", attempts=3)
    recent = old_results(1, days=1)[0]
    TaskCompletion.objects.create(task_id=pruned[0])  # CASCADE: goes with its task
    failure = TaskFailure.objects.create(task_id=pruned[1], worker="w", error="e")  # SET_NULL: stays, unlinked
    call_command("nightjar_prune_tasks", "--days", "30", "--batch-size", "5000")
    assert set(TaskRecord.objects.values_list("pk", flat=True)) == {failed_and_kept, recent}
    assert not TaskCompletion.objects.exists()
    failure.refresh_from_db()
    assert failure.task_id is None
    assert "Deleted 40000 finished task results older than 30 days" in capsys.readouterr().out


def test_each_prune_batch_commits_alone_so_a_guest_write_goes_through_between_them():
    old_results(3000)
    seen = []

    def guest_writes(deleted_so_far: int) -> None:
        assert not connection.in_atomic_block  # the batch's transaction is over
        if connection.vendor == "sqlite":
            # Another connection that would not wait a moment: the write lock must be free.
            guest = sqlite3.connect(connection.settings_dict["NAME"], timeout=0, isolation_level=None)
            guest.execute("BEGIN IMMEDIATE")
            guest.execute("INSERT INTO auth_group (name) VALUES (?)", [f"guest-{deleted_so_far}"])
            guest.execute("COMMIT")
            guest.close()
        seen.append(deleted_so_far)

    deleted = pruning.prune_finished(older_than=timedelta(days=30), batch_size=1000, after_batch=guest_writes)
    assert (deleted, seen) == (3000, [1000, 2000, 3000])
    assert not TaskRecord.objects.exists()


def test_the_package_page_s_settings_block_is_one_queue_a_numeric_time_limit_and_the_table_s_broker_port():
    page = (ROOT / "docs" / "tasks.md").read_text()
    block = tasks_settings_block()
    pasted = {"INSTALLED_APPS": [], "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3"}}}
    exec(block, pasted)  # a stranger's settings module: the block as written
    backend = pasted["TASKS"]["default"]
    assert backend.get("QUEUES", ["default"]) == ["default"]  # two would make every command need --channel
    limit = backend["OPTIONS"]["time_limit"]
    assert isinstance(limit, int | float) and not isinstance(limit, bool)  # None reads as "no limit"; it is 300
    if connection.vendor == "sqlite":  # the block's own busy timeout: its time limit passes the check
        assert list(NightjarBackend("default", backend).check()) == []
    table = re.search(r"^\| `NIGHTJAR_BROKER_URL` \| `([^`]+)`", page, re.M).group(1)
    ports = {
        urlsplit(url).port
        for url in (pasted["NIGHTJAR_BROKER_URL"], table, engine_conf.DEFAULTS["NIGHTJAR_BROKER_URL"])
    }
    assert ports == {5672}
    assert 'pip install "django-nightjar[redis,postgres]"' in page


@pytest.fixture
def tasks_only(monkeypatch):
    """The registry as in a project with the Tasks backend and without the site (no tickets, no lab)."""
    monkeypatch.setattr(channel, "_channels", {name: c for name, c in channel._channels.items() if name == "tasks"})


def test_the_worker_s_help_in_a_project_without_the_lab_names_neither_the_lab_nor_the_test_switches(tasks_only):
    shown = NightjarWorker().create_parser("manage.py", "nightjar_worker").format_help()
    assert "nightjar_tasks.runner.handle" in shown
    for word in ("lab", "NIGHTJAR_HANDLER", "--pause", "--crash"):
        assert word not in shown


def test_the_worker_s_test_switches_still_work_when_hidden(tasks_only):
    options = NightjarWorker().create_parser("manage.py", "nightjar_worker").parse_args(["--pause", "after-commit"])
    assert options.pause == "after-commit"


def test_the_site_s_worker_help_still_shows_the_lab_s_switches():
    shown = NightjarWorker().create_parser("manage.py", "nightjar_worker").format_help()
    assert "--pause" in shown and "--crash" in shown and "lab/handler.py" in shown


def test_what_points_staff_to_parked_tasks_names_the_command_nightjar_parked(capsys):
    TaskRecord.objects.create(task_path="tests.task_functions.add")  # READY: the status has a line of totals
    with contextlib.suppress(CommandError):
        call_command("nightjar_tasks_status")
    said = capsys.readouterr().out
    assert "`nightjar_parked --channel tasks`" in said
    assert "`parked" not in said


def test_the_package_names_each_django_and_python_it_is_tested_on_and_its_pages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    tested = {"Framework :: Django :: 5.2", "Framework :: Django :: 6.0", "Framework :: Django :: 6.1"}
    tested |= {"Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12"}
    assert tested <= set(project["classifiers"])
    for page in project["urls"].values():
        assert (ROOT / page).is_file()
