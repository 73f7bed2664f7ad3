"""docs/lab.md shows each step's handler as a complete file; the guide's copy
must be the file `lab start --step N` writes (tickets/lab_files/), character
for character, so the two cannot drift. Fast: no database, no broker."""

import re

import pytest

from classroom import lab
from tests.conftest import ROOT

pytestmark = pytest.mark.fast

# A full handler in the guide: a line naming its file, then its python block.
SHOWN = re.compile(r"`tickets/lab_files/(\w+\.py)`[^\n]*\n\n```python\n(.*?)```\n", re.DOTALL)


def shown_files() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, text in SHOWN.findall((ROOT / "docs" / "lab.md").read_text()):
        found.setdefault(name, []).append(text)
    return found


def test_the_guide_shows_every_steps_handler_as_the_file_itself():
    found = shown_files()
    for step, path in lab.STEP_FILES.items():
        assert path.name in found, f"docs/lab.md does not show step {step}'s file {path.name} in full"
        for text in found[path.name]:
            assert text == path.read_text(), f"docs/lab.md's copy of {path.name} differs from the file"


def test_the_guide_shows_no_handler_file_that_does_not_exist():
    names = {path.name for path in lab.STEP_FILES.values()}
    assert set(shown_files()) <= names
