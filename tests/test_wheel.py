"""The library as a stranger installs it: the wheel built from this checkout
(the engine and the Tasks backend, nothing of the site), installed with one
broker extra into a fresh virtual environment with no checkout on the path,
into a fresh `django-admin startproject` whose settings get docs/tasks.md's block
pasted as written; then check, migrate, a task enqueued inside atomic(), the
worker run, and the result read SUCCESSFUL from another process — on Django
5.2 with the backport (Python 3.11) and on Django 6.1 with django.tasks
(Python 3.12, the image's pyenv build; none found fails). And with no
broker extra at all: the "No broker needed" block (the database transport,
db://default) on SQLite and on PostgreSQL, Django 5.2."""

import contextlib
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devtools import chaos, pythons
from tests.helpers import tasks_settings_block

pytestmark = [pytest.mark.system, pytest.mark.transport_free]

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("nightjar_delivery", "nightjar_tasks")  # the wheel's only top-level packages


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a clean copy of what the distribution is made of
    (an in-tree build would reuse whatever an earlier build left in build/)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "LICENSE", source)
    (source / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "tasks.md", source / "docs")  # the distribution's readme
    for package in LIBRARY:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (built,) = out.glob("django_nightjar-*.whl")
    return built


def test_the_wheel_holds_the_engine_and_the_tasks_backend_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == set(LIBRARY)
    assert "nightjar_tasks/migrations/0001_initial.py" in names
    assert "nightjar_delivery/management/commands/nightjar_worker.py" in names
    assert "nightjar_delivery/templates/admin/nightjar_delivery/plan.html" in names  # the admin's plan page
    assert {"nightjar_delivery/py.typed", "nightjar_tasks/py.typed"} <= set(names)  # PEP 561: the annotations are read
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for site_part in ("tickets/", "desk/", "door/", "classroom/", "nightjar/", "tests/", "examples/", "devtools/"):
        assert not any(name.startswith(site_part) for name in names), site_part
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: django-nightjar" in metadata
    assert "License-Expression: BSD-3-Clause" in metadata
    for extra in ("rabbitmq", "redis", "postgres", "prometheus", "backport"):
        assert f"Provides-Extra: {extra}" in metadata
    # pika, redis-py and prometheus-client only with their extras: a project on Redis never installs pika.
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert [line for line in requires if "extra ==" not in line] == ["Requires-Dist: Django>=5.2"]


TASK_APP = {
    "shop/__init__.py": "",
    "shop/models.py": """
        from django.db import models

        class Visit(models.Model):
            name = models.CharField(max_length=100)
        """,
    "shop/tasks.py": """
        try:
            from django.tasks import task
        except ImportError:
            from django_tasks import task

        from shop.models import Visit

        @task
        def record_visit(name):
            Visit.objects.create(name=name)
            return f"recorded {name}"
        """,
}

ENQUEUE = """
from django.db import transaction
from shop.tasks import record_visit
with transaction.atomic():
    result = record_visit.enqueue("Ada")
print(result.id)
"""

RESULT = """
from shop.models import Visit
from shop.tasks import record_visit
result = record_visit.get_result({result_id!r})
print(result.status, result.return_value, Visit.objects.count())
"""


@pytest.mark.parametrize(
    ("django", "extras"),
    [("5.2", "rabbitmq,backport"), ("6.1", "rabbitmq")],
    ids=["django-5.2-python-3.11", "django-6.1-python-3.12"],
)
def test_a_stranger_installs_the_wheel_and_runs_a_task_once(wheel, rabbit, tmp_path, django, extras):
    python = sys.executable if django == "5.2" else pythons.python312()
    assert python, "No Python 3.12 or newer found for Django 6.1 (pyenv's versions, python3.12, or PYTHON312)."
    run = _stranger(tmp_path, python, f"{wheel}[{extras}]", django)
    _run_a_task(
        run,
        "# Pasted from docs/tasks.md, as written:\n"
        + tasks_settings_block()
        + "\n# This project's own:\n"
        + 'INSTALLED_APPS += ["shop"]\n'
        + f"NIGHTJAR_BROKER_URL = {rabbit.url!r}\n"
        + f'NIGHTJAR_TASKS_QUEUE = "wheel-{django}"\n',
    )


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_stranger_with_no_broker_runs_a_task_on_the_database_transport(wheel, tmp_path, database):
    """docs/tasks.md's "No broker needed" block as written: its `pip install`
    line's extras (no broker's), its settings pasted into a fresh startproject,
    nothing else running; no pika, no redis-py in the venv. On the project's
    SQLite as startproject made it, and on PostgreSQL (a throwaway cluster of
    its own; the `postgres` extra, as the page says, and the project's
    DATABASES pointed at it: nothing but the database)."""
    pip_line, block = no_broker_block()
    extras = re.search(r"django-nightjar\[([^\]]*)\]", pip_line).group(1)
    assert not {"rabbitmq", "redis"} & set(extras.split(",")), pip_line
    assert 'NIGHTJAR_BROKER_URL = "db://default"' in block
    own = ""
    with contextlib.ExitStack() as stack:
        if database == "postgresql":
            assert "`postgres` on PostgreSQL" in no_broker_section(), "the page no longer names the postgres extra"
            extras += ",postgres"
            cluster = chaos.Postgres("nightjar-stranger-pg.")
            stack.callback(cluster.remove)
            url = urlsplit(cluster.start())
            database_settings = {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.path.lstrip("/"),
                "USER": url.username,
                "PASSWORD": url.password or "",
                "HOST": url.hostname,
                "PORT": url.port,
            }
            own = f"\n# This project's own database:\nDATABASES = {{'default': {database_settings!r}}}\n"
        run = _stranger(tmp_path, sys.executable, f"{wheel}[{extras}]", "5.2")
        absent = run(
            "python", "-c", "import importlib.util as u; print([m for m in ('pika', 'redis') if u.find_spec(m)])"
        )
        assert absent.strip() == "[]"
        _run_a_task(
            run,
            "# Pasted from docs/tasks.md's No broker needed, as written:\n"
            + block
            + 'INSTALLED_APPS += ["shop"]\n'
            + own,
        )
        if database == "postgresql":  # the task's row, its message and its result were in PostgreSQL
            engine = run(
                "python", "manage.py", "shell", "-c", "from django.db import connection; print(connection.vendor)"
            )
            assert engine.strip().splitlines()[-1] == "postgresql"


def no_broker_section() -> str:
    page = (ROOT / "docs" / "tasks.md").read_text()
    return page.split("## No broker needed", 1)[1].split("\n## ", 1)[0]


def no_broker_block() -> tuple[str, str]:
    """The indented block under docs/tasks.md's "No broker needed" heading: its
    `pip install` line (on Django 5.2), and the settings lines after it."""
    block = textwrap.dedent(re.search(r"\n\n((?:    .*\n|\n)+)", no_broker_section()).group(1))
    pip_line, settings = block.split("\n", 1)
    assert pip_line.startswith("pip install "), block
    return pip_line, settings.strip("\n") + "\n"


def _stranger(tmp_path: Path, python: str, requirement: str, django: str):
    """A fresh venv with `requirement` installed and a fresh startproject with
    TASK_APP beside it; returns a runner in the project's folder."""
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, requirement, f"Django=={django}.*"], check=True, timeout=600)

    project = tmp_path / "project"
    project.mkdir()
    # The project's own folder only: no checkout on the path (PYTHONPATH cleared, cwd the project).
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    run = _runner(project, env)
    run("django-admin", "startproject", "mysite", ".")
    for name, text in TASK_APP.items():
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text(textwrap.dedent(text))
    return run


def _run_a_task(run, pasted: str) -> None:
    """`pasted` appended to the project's settings; check, migrate, a task
    enqueued inside atomic(), the worker run to an empty queue, the result
    read SUCCESSFUL from another process."""
    settings = run.cwd / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + pasted)
    run("python", "manage.py", "makemigrations", "shop")
    assert "System check identified no issues" in run("python", "manage.py", "check")
    run("python", "manage.py", "migrate")
    result_id = run("python", "manage.py", "shell", "-c", ENQUEUE).strip().splitlines()[-1]
    worked = run("python", "manage.py", "nightjar_worker", "--channel", "tasks", "--drain")
    assert "Handler returned." in worked
    status = run("python", "manage.py", "shell", "-c", RESULT.format(result_id=result_id))
    assert status.strip().splitlines()[-1].split() == ["SUCCESSFUL", "recorded", "Ada", "1"]


def _runner(cwd: Path, env: dict[str, str]):
    def run(*args: str) -> str:
        done = subprocess.run(
            list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
        assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run.cwd = cwd
    return run
