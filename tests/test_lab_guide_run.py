"""docs/lab.md, run as a learner runs it (tests/guide.py): bin/run in a copy
of the checkout, every console command in a fresh terminal, the browser steps
in Chromium, a real Ctrl+C; every output must be the one the guide shows.
The RabbitMQ part runs in the SQLite + RabbitMQ leg of bin/test, the Redis
part in the Redis leg; the PostgreSQL leg skips both (bin/run's lab uses
SQLite either way)."""

import os

import pytest

from tests.conftest import ROOT, TRANSPORT
from tests.guide import run_guide

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="the guide's lab runs on SQLite; run in the SQLite legs"
)


def test_the_lab_guide_shows_what_really_happens(tmp_path):
    part = "redis" if TRANSPORT == "redis" else "rabbitmq"
    timings = run_guide(ROOT / "docs" / "lab.md", part, tmp_path)
    print(f"docs/lab.md ({part}): " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()))
