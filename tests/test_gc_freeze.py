"""The garbage collector's full passes never walk what start-up made (issue 43).

A full pass over the ~0.5 M objects Django and the site create took 30-110 ms
in the request that triggered it, each gunicorn worker in turn: the web path's
periodic p99 stall. Frozen once the app is loaded, and again once the first
requests have built the rest for good, they are no longer walked; the worker
freezes what its start-up made too. (Speed is the benchmark's; this proves
the mechanism.)"""

import gc
import io
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.fixture
def gunicorn_config(monkeypatch, tmp_path, unfrozen):
    # A metrics folder of the test's own: reading the file then changes nothing else of this process.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    return runpy.run_path(str(ROOT / "gunicorn.conf.py"))


def test_a_gunicorn_worker_freezes_what_loading_the_app_made(gunicorn_config):
    gunicorn_config["post_worker_init"](SimpleNamespace(nr=0))
    assert gc.get_freeze_count() > 10_000  # Django and the site, imported by this test process


def test_a_gunicorn_worker_freezes_again_once_after_its_first_requests(gunicorn_config):
    after = gunicorn_config["FREEZE_AFTER_REQUESTS"]
    for number in (1, after - 1, after + 1):
        gunicorn_config["post_request"](SimpleNamespace(nr=number), None, {}, None)
        assert gc.get_freeze_count() == 0, number
    gunicorn_config["post_request"](SimpleNamespace(nr=after), None, {}, None)
    assert gc.get_freeze_count() > 10_000


@pytest.mark.django_db
def test_the_worker_freezes_what_its_start_up_made(unfrozen):
    call_command("worker", "--drain", stdout=io.StringIO())
    assert gc.get_freeze_count() > 10_000
