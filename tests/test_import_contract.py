"""The import direction between the apps, read from the source with ast (no
import runs, no broker needed): the engine (nightjar_delivery/) imports none of the
apps that use it; nothing imports the door, the desk or the classroom (the
desk may, once it shows arrivals); the classroom uses tickets and the
engine only; no two modules import each other, even around a loop (as
tickets/lab.py and tickets/verify.py once did); no app of the product imports
devtools/ (the tools of tests/ and bin/), and devtools/ imports none of the
product nor tests/; each broker client library is imported in one transport
module and nowhere else. The user apps import the engine only through the
names its package exports (nightjar_delivery/__init__.py: its public face),
never `nightjar_delivery.<module>`; a command is public by its name, so a
user's command may subclass or alias the engine's."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
APPS = ["nightjar_delivery", "tickets", "door", "desk", "classroom", "nightjar", "nightjar_tasks", "devtools", "mail"]
# The product: what is deployed. devtools/ (ports, namespaces, gunicorn, a
# guest client for the tests and bin/) is none of it, and imports none of it.
PRODUCT = {"nightjar_delivery", "tickets", "door", "desk", "classroom", "nightjar", "nightjar_tasks", "mail"}

# app -> the top-level packages it must never import
FORBIDDEN = {
    "nightjar_delivery": {"tickets", "door", "desk", "classroom", "nightjar", "nightjar_tasks", "devtools", "mail"},
    # The engine's second user: Django and the engine only.
    "nightjar_tasks": {"tickets", "door", "desk", "classroom", "nightjar", "devtools", "mail"},
    # The domain tells its facts (tickets/signals.py); the guests' mails listen.
    "tickets": {"door", "desk", "classroom", "devtools", "mail"},
    "mail": {"door", "desk", "classroom", "nightjar", "devtools"},
    "door": {"desk", "classroom", "devtools"},
    "nightjar": {"door", "desk", "classroom", "devtools"},
    "desk": {"classroom", "devtools"},
    "classroom": {"desk", "door", "nightjar", "devtools"},  # tickets and delivery only
    "devtools": PRODUCT | {"tests"},
}
# Imported by nobody outside themselves (settings and URLs name them as strings).
IMPORTED_BY_NOBODY = {"desk", "classroom"}
# broker client library -> the one module that may import it
BROKER_LIBRARIES = {
    "pika": "nightjar_delivery/transport/amqp.py",
    "redis": "nightjar_delivery/transport/redis_streams.py",
}


def imported_names(source: str) -> list[tuple[int, str]]:
    """(line, dotted module) for every absolute import, at any depth (a
    function-level import counts as much as one at the top)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


# The apps that use the engine: its public face is their only door into it.
ENGINE_USERS = {"tickets", "door", "desk", "classroom", "nightjar", "nightjar_tasks", "mail"}
# A user's command may alias an engine command (Django's commands are public by name).
ENGINE_COMMANDS = "nightjar_delivery.management.commands."


def public_face() -> set[str]:
    """The names nightjar_delivery exports, read from its source (no import runs)."""
    tree = ast.parse((ROOT / "nightjar_delivery" / "__init__.py").read_text())
    (table,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["_PUBLIC"]
    ]
    return {key.value for key in table.keys}


def engine_imports(source: str) -> list[tuple[int, str, bool]]:
    """(line, what, through the face) for each import of the engine: each name
    of `from nightjar_delivery import` (True), a dotted `import` or a `from
    nightjar_delivery.<module> import` (False: past the face)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name, a.name == "nightjar_delivery")
                for a in node.names
                if a.name.startswith("nightjar_delivery")
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "nightjar_delivery":
            found += [(node.lineno, f"nightjar_delivery.{alias.name}", True) for alias in node.names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("nightjar_delivery.")
        ):
            found.append((node.lineno, node.module, False))
    return found


def violations(app: str, path: str, source: str) -> list[str]:
    problems = []
    if app in ENGINE_USERS:
        public = public_face()
        for line, name, through_face in engine_imports(source):
            if name == "nightjar_delivery" or name.startswith(ENGINE_COMMANDS):
                continue
            if not through_face or name.removeprefix("nightjar_delivery.") not in public:
                problems.append(
                    f"{path}:{line} imports {name} (a user of the engine imports only nightjar_delivery's names)"
                )
    for line, module in imported_names(source):
        top = module.split(".")[0]
        if top in FORBIDDEN.get(app, ()):
            problems.append(f"{path}:{line} imports {module} ({app} may not import {top})")
        if top in BROKER_LIBRARIES and path != BROKER_LIBRARIES[top]:
            problems.append(f"{path}:{line} imports {module} (only {BROKER_LIBRARIES[top]} may)")
    return problems


def app_sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            yield app, path.relative_to(ROOT).as_posix(), path.read_text()


def test_the_apps_import_only_in_the_allowed_directions():
    problems = [problem for app, path, source in app_sources() for problem in violations(app, path, source)]
    assert problems == []


def test_nothing_outside_the_classroom_or_the_desk_imports_them():
    """Every Python file of the project (bin/ and manage.py too), not only the apps above."""
    problems = []
    tops = [
        top for top in ROOT.iterdir() if not top.name.startswith(".") and top.name not in {"tests", *IMPORTED_BY_NOBODY}
    ]
    paths = [path for top in tops for path in ([top] if top.suffix == ".py" else sorted(top.rglob("*.py")))]
    for path in paths:
        for line, module in imported_names(path.read_text()):
            if module.split(".")[0] in IMPORTED_BY_NOBODY:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert problems == []
    assert {ROOT / "tickets" / "channel.py", ROOT / "manage.py"} <= set(paths)
    assert all(IMPORTED_BY_NOBODY - {app} <= FORBIDDEN[app] for app in APPS if app in FORBIDDEN)


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from tickets import lab` is tickets.lab)."""
    names = {module_name(path) for path in sources}
    graph = {name: set() for name in names}
    for path, source in sources.items():
        name = module_name(path)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names} & names
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = {f"{node.module}.{alias.name}" for alias in node.names} & names
                graph[name] |= found or ({node.module} & names)
        graph[name].discard(name)
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another around a loop, sorted."""
    reach = {name: set() for name in graph}
    for name in graph:
        todo = list(graph[name])
        while todo:
            other = todo.pop()
            if other not in reach[name]:
                reach[name].add(other)
                todo += graph[other]
    loops = {tuple(sorted(n for n in graph if n in reach[name] and name in reach[n])) for name in graph}
    return sorted(list(loop) for loop in loops if loop)


def test_no_two_modules_import_each_other():
    sources = {path: source for _, path, source in app_sources()}
    assert import_loops(module_imports(sources)) == []
    circle = {
        "tickets/lab.py": "def grade():\n    from tickets import verify\n",
        "tickets/verify.py": "from tickets import lab\n",
    }
    assert import_loops(module_imports(circle)) == [["tickets.lab", "tickets.verify"]]


def test_the_engine_is_read():
    """The contract above is not vacuous: the engine's modules are there to read."""
    read = {path for app, path, _ in app_sources() if app == "nightjar_delivery"}
    assert {
        "nightjar_delivery/worker/loop.py",
        "nightjar_delivery/transport/amqp.py",
        "nightjar_delivery/channel.py",
    } <= read


@pytest.mark.parametrize(
    ("app", "path", "source"),
    [
        ("nightjar_delivery", "nightjar_delivery/worker.py", "def f():\n    from tickets.models import Ticket\n"),
        ("nightjar_delivery", "nightjar_delivery/worker.py", "import tickets.services\n"),
        ("tickets", "tickets/views.py", "from desk import charts\n"),
        ("tickets", "tickets/channel.py", "from classroom import lab\n"),
        ("classroom", "classroom/lab.py", "from door.services import arrivals\n"),
        ("nightjar_delivery", "nightjar_delivery/worker.py", "import pika\n"),
        ("tickets", "tickets/services/registrations.py", "from redis import Redis\n"),
        ("tickets", "tickets/views.py", "from devtools.ports import free_port\n"),
        ("devtools", "devtools/web.py", "from tickets.models import Ticket\n"),
        ("devtools", "devtools/ports.py", "from tests.conftest import ROOT\n"),
        ("tickets", "tickets/batch.py", "from nightjar_delivery.recording import record_rejection\n"),
        ("nightjar_tasks", "nightjar_tasks/runner.py", "import nightjar_delivery.sql\n"),
        ("desk", "desk/views.py", "def f():\n    from nightjar_delivery import health\n"),
        ("door", "door/views.py", "from nightjar_delivery.codec import load_json\n"),
    ],
)
def test_a_forbidden_import_is_found(app, path, source):
    assert violations(app, path, source)


def test_relative_and_allowed_imports_pass():
    assert not violations(
        "nightjar_delivery",
        "nightjar_delivery/worker/loop.py",
        "from . import metrics\nfrom nightjar_delivery import transport\n",
    )
    assert not violations(
        "nightjar_delivery", "nightjar_delivery/transport/amqp.py", "import pika\nimport pika.exceptions\n"
    )
    assert not violations("tickets", "tickets/services/registrations.py", "from nightjar_delivery import transport\n")
    classroom = (
        "from classroom import verify\nfrom nightjar_delivery import exits\nfrom tickets.handlers import shown\n"
    )
    assert not violations("classroom", "classroom/lab.py", classroom)
    face = "import nightjar_delivery as engine\nfrom nightjar_delivery import Channel, register, sql\n"
    assert not violations("nightjar_tasks", "nightjar_tasks/channel.py", face)
    alias = "from nightjar_delivery.management.commands.nightjar_worker import Command\n"
    assert not violations("tickets", "tickets/management/commands/worker.py", alias)
    # The engine itself reads its own modules.
    assert not violations(
        "nightjar_delivery", "nightjar_delivery/reconcile.py", "from nightjar_delivery import recording\n"
    )


def test_the_public_face_names_only_what_the_engine_defines():
    """Every exported name resolves (the table the import check reads is the one the package serves)."""
    import nightjar_delivery

    assert public_face() == set(nightjar_delivery.__all__)
    for name in nightjar_delivery.__all__:
        assert getattr(nightjar_delivery, name) is not None, name


def settings_read_outside_conf(path: str, source: str) -> list[str]:
    """`settings.NAME` in an engine module other than nightjar_delivery/conf.py."""
    return [
        f"{path}:{node.lineno} reads settings.{node.attr} (read it as nightjar_delivery.conf.{node.attr})"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "settings"
    ]


def test_the_engine_reads_its_settings_in_one_place():
    """Every engine setting has its default in nightjar_delivery/conf.py and is read there."""
    from nightjar_delivery import conf

    problems = [
        problem
        for app, path, source in app_sources()
        if app == "nightjar_delivery" and path != "nightjar_delivery/conf.py"
        for problem in settings_read_outside_conf(path, source)
    ]
    assert problems == []
    assert settings_read_outside_conf("nightjar_delivery/worker.py", "settings.NIGHTJAR_QUEUE\n")
    for name, default in conf.DEFAULTS.items():
        assert isinstance(getattr(conf, name), type(default)), name
