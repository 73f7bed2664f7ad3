"""SQLite's WAL checkpoints happen off the guests' requests (issue 43): a
site process's request connections leave them to a thread of its own, which
does them, and checkpoint on commit themselves only past a bound."""

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from nightjar import walcheckpoint
from tickets.models import Registration

pytestmark = pytest.mark.fast


def sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the WAL is SQLite's; bin/test runs this file on PostgreSQL too")


def pragma(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchone()[0]


@pytest.fixture
def site_connection():
    """This thread's connection opened anew as a site process opens it."""
    connection.close()
    connection_created.connect(walcheckpoint.request_connections_leave_checkpoints, dispatch_uid="test-wal")
    try:
        connection.ensure_connection()
        yield connection
    finally:
        connection_created.disconnect(dispatch_uid="test-wal")
        connection.close()  # later tests get SQLite's default again


@pytest.mark.django_db(transaction=True)
def test_a_site_connection_checkpoints_on_commit_only_past_the_bound(site_connection):
    sqlite_only()
    assert pragma("wal_autocheckpoint") == walcheckpoint.FALLBACK_PAGES
    assert walcheckpoint.FALLBACK_PAGES > 1000  # above SQLite's default, which a guest's commit used to cross


@pytest.mark.django_db(transaction=True)
def test_the_checkpoint_thread_copies_what_requests_committed_into_the_database(site_connection):
    sqlite_only()
    # One commit per guest, as POSTs make them: past SQLite's default of 1,000
    # pages, where the commit that crossed it used to copy and fsync.
    for i in range(400):
        Registration.objects.create(name=f"Guest {i}")
    thread = walcheckpoint.Checkpointer("default", interval=0.01)
    thread.start()
    try:
        with thread.passed:
            assert thread.passed.wait_for(lambda: thread.passes >= 1, timeout=30)
        busy, in_log, copied = thread.last
    finally:
        thread.stop()
    assert in_log > 1000  # no request checkpointed (one would have restarted the WAL)
    assert busy == 0 and copied == in_log  # the thread copied all of it into the database


@pytest.mark.django_db
def test_on_postgresql_nothing_is_started():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL checkpoints in its own processes")
    assert walcheckpoint.checkpoint_in_background() == []


def test_a_failing_checkpoint_is_logged_once_then_its_recovery_not_every_second(monkeypatch, caplog):
    """A web process's thread tries every second for as long as the site
    runs: a database file that stays locked or unreadable for an hour must
    not write 3,600 tracebacks (it once did), and the log must say when it
    works again."""
    thread = walcheckpoint.Checkpointer("default", interval=0.005)
    failing = True

    def checkpoint():
        if failing:
            raise OSError("disk I/O error")
        return (0, 0, 0)

    monkeypatch.setattr(thread, "checkpoint", checkpoint)
    caplog.set_level("INFO", logger="nightjar.walcheckpoint")

    def passes(count: int) -> None:
        with thread.passed:
            target = thread.passes + count
            assert thread.passed.wait_for(lambda: thread.passes >= target, timeout=30)

    thread.start()
    try:
        passes(30)
        failed = [record for record in caplog.records if record.levelname == "ERROR"]
        assert len(failed) == 1 and failed[0].exc_info is not None  # the first failure, with its traceback
        assert "retrying every" in failed[0].getMessage()
        failing = False
        passes(5)
    finally:
        thread.stop()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert messages[1].startswith("The WAL checkpoint of database 'default' works again after")
