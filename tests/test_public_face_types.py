"""What a type checker sees of the engine's public face is what the package serves.

nightjar_delivery/__init__.py loads its names lazily (__getattr__, from the
_PUBLIC table), which a type checker cannot follow; its `if TYPE_CHECKING:`
block names the same objects for mypy (bin/test runs it). This test holds
the two together: a name added to _PUBLIC without its import there would be
an `object` to mypy and to every user's type checker."""

import ast
import types
from pathlib import Path

import pytest

import nightjar_delivery

pytestmark = pytest.mark.fast

INIT = Path(nightjar_delivery.__file__)


def names_for_type_checkers() -> dict[str, object]:
    """What the package's `if TYPE_CHECKING:` block binds, run as plain imports."""
    tree = ast.parse(INIT.read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=block.body, type_ignores=[]), str(INIT), "exec"), namespace)
    namespace.pop("__builtins__")
    return namespace


def test_type_checkers_see_each_public_name_as_the_object_the_package_serves():
    seen = names_for_type_checkers()
    for name in nightjar_delivery.__all__:
        assert name in seen, f"{name} is public but missing from the TYPE_CHECKING block"
        assert seen[name] is getattr(nightjar_delivery, name), name
    # Anything else it binds is an engine module it reads a renamed name from.
    extra = {name: value for name, value in seen.items() if name not in nightjar_delivery.__all__}
    assert all(isinstance(value, types.ModuleType) for value in extra.values()), extra
    assert all(value.__name__ == f"nightjar_delivery.{name}" for name, value in extra.items()), extra
