"""Set-up the test files share, written once: the per-delivery/batch
parametrization, the broken tickets table, and
waiting for a condition. (Broker nodes, worker processes, gunicorn and the
tiers live in tests/conftest.py.)"""

import re
import textwrap
import time
from pathlib import Path

import pytest
from django.db import connection

from devtools.guest import submission_key

# The worker both ways: one delivery at a time, and batches of up to 10 (more
# than any of these tests publishes at once, so one batch takes them all).
MODES = pytest.mark.parametrize("mode", [(), ("--batch", "10")], ids=["per-delivery", "batch"])


def break_tickets_table() -> None:
    """Every ticket insert fails from now on (a database error in the handler) until mend_tickets_table()."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE tickets_ticket RENAME TO tickets_ticket_away")


def mend_tickets_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE tickets_ticket_away RENAME TO tickets_ticket")


def until(predicate, timeout: float = 30, what: str = "the condition", *, every: float = 0.2, ignoring=()):
    """predicate()'s first true value, asked every `every` seconds; fails
    after `timeout` naming `what`. Exceptions of the types in `ignoring`
    count as not yet (a broker that is coming back)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"Timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def register_by_form(client, name: str):
    """Fill in the evening form with the Django test client, as a guest does; the POST's response."""
    key = submission_key(client.get("/evening/").content.decode())
    return client.post("/evening/", {"name": name, "submission_key": key})


def tasks_settings_block() -> str:
    """The indented block after "Paste into your settings module" in
    docs/tasks.md (the package's page), as written: tests/test_wheel.py pastes
    it into a stranger's project, tests/test_tasks_ops.py reads what it says."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "tasks.md").read_text()
    after = page.split("Paste into your settings module", 1)[1].split(":\n", 1)[1]
    return textwrap.dedent(re.match(r"\n((?:    .*\n|\n)+)", after).group(1))
