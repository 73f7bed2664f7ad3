"""docs/lab.md, run as a learner runs it (tests/guide.py): bin/run in a copy
of the checkout, every console command in a fresh terminal, the browser steps
in Chromium, a real Ctrl+C; every output must be the one the guide shows.
The RabbitMQ part runs in the SQLite + RabbitMQ leg of bin/test, the Redis
part in the Redis leg; the PostgreSQL leg skips both (bin/run's lab uses
SQLite either way)."""

import os

import pytest

from tests.conftest import ROOT, TRANSPORT
from tests.guide import check_markup, parse, run_guide

GUIDE = ROOT / "docs" / "lab.md"
SQLITE_LEGS_ONLY = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="the guide's lab runs on SQLite; run in the SQLite legs"
)


@pytest.mark.fast
def test_the_runner_can_follow_every_step_of_the_guide():
    """Fast: every marker is one the runner knows, every block is in a part,
    and both parts exist (a typo would otherwise skip a step silently)."""
    assert check_markup(GUIDE) == []
    parts = {step.part for step in parse(GUIDE.read_text()) if step.kind == "console"}
    assert parts == {"rabbitmq", "redis"}


@pytest.mark.system
@SQLITE_LEGS_ONLY
def test_the_lab_guide_shows_what_really_happens(tmp_path):
    part = "redis" if TRANSPORT == "redis" else "rabbitmq"
    timings = run_guide(GUIDE, part, tmp_path)
    print(f"docs/lab.md ({part}): " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()))
