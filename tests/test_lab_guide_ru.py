"""docs/lab.ru.md, the Russian guide, is docs/lab.md for Russian-speaking
learners: its own prose, and the very same commands, outputs, code and
runner markup, in the same order.

The fast test keeps the two from drifting: every fenced block (console,
python, sql) and every runner marker line (`<!-- guide: ... -->`,
`<!-- browser: ... -->`) of the Russian guide must equal the English one's,
one for one. After re-capturing docs/lab.md (GUIDE_UPDATE=1), copy its blocks
into the Russian guide with `.venv/bin/python -m tests.test_lab_guide_ru`
(the prose around them is left as it is: translate any changed sentence).

The slow test walks the Russian guide's RabbitMQ part with tests/guide.py, as
test_lab_guide_run does the English one; it runs in bin/test's PostgreSQL leg
only (DATABASE_URL set), where the English run is skipped, so each leg walks
a guide once. The Redis part has the English Redis part's blocks, which the
Redis leg walks.
"""

import os
import sys
from pathlib import Path

import pytest

from tests.guide import MARKER, check_markup, run_guide

ROOT = Path(__file__).resolve().parent.parent
ENGLISH = ROOT / "docs" / "lab.md"
RUSSIAN = ROOT / "docs" / "lab.ru.md"


def shared_parts(text: str) -> list[tuple[int, str]]:
    """(line, text) of each fenced block and each runner marker line, in order."""
    lines = text.split("\n")
    parts, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            end = i + 1
            while end < len(lines) and lines[end] != "```":
                end += 1
            parts.append((i + 1, "\n".join(lines[i : end + 1])))
            i = end + 1
            continue
        if MARKER.search(lines[i]):
            parts.append((i + 1, lines[i]))
        i += 1
    return parts


@pytest.mark.fast
def test_the_russian_guide_has_the_english_guides_blocks_and_markup_in_order():
    english, russian = shared_parts(ENGLISH.read_text()), shared_parts(RUSSIAN.read_text())
    for index, ((en_line, en), (ru_line, ru)) in enumerate(zip(english, russian, strict=False)):
        assert ru == en, (
            f"block {index + 1}: docs/lab.ru.md:{ru_line} differs from docs/lab.md:{en_line} "
            "(python -m tests.test_lab_guide_ru copies the English blocks over):\n"
            f"--- English\n{en}\n--- Russian\n{ru}"
        )
    assert check_markup(RUSSIAN) == []
    assert len(russian) == len(english), (
        f"docs/lab.ru.md has {len(russian)} blocks and markers, docs/lab.md {len(english)}: "
        "a block or a marker was added or left out"
    )


@pytest.mark.fast
def test_the_russian_guide_is_russian_between_the_blocks():
    """Not the English text copied: most prose lines carry Cyrillic."""
    text = RUSSIAN.read_text()
    for _, part in shared_parts(text):
        text = text.replace(part, "")
    prose = [line for line in text.split("\n") if line.strip() and not line.startswith("#")]
    cyrillic = [line for line in prose if any("а" <= c.lower() <= "я" or c in "ёЁ" for c in line)]
    assert len(cyrillic) >= 0.9 * len(prose), f"{len(prose) - len(cyrillic)} of {len(prose)} prose lines"


@pytest.mark.system
@pytest.mark.postgres
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL"),
    reason="the Russian guide runs in bin/test's PostgreSQL leg (the English one in the SQLite legs)",
)
def test_the_russian_lab_guide_shows_what_really_happens(tmp_path):
    timings = run_guide(RUSSIAN, "rabbitmq", tmp_path, update=False)
    print("docs/lab.ru.md (rabbitmq): " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()))


def copy_english_blocks() -> None:
    """Write docs/lab.md's blocks and markers over docs/lab.ru.md's, in order."""
    english, russian = shared_parts(ENGLISH.read_text()), shared_parts(RUSSIAN.read_text())
    if len(english) != len(russian):
        sys.exit(
            f"docs/lab.ru.md has {len(russian)} blocks and markers, docs/lab.md {len(english)}: add or remove by hand"
        )
    lines = RUSSIAN.read_text().split("\n")
    for (line, old), (_, new) in sorted(zip(russian, english, strict=True), reverse=True):
        lines[line - 1 : line - 1 + len(old.split("\n"))] = new.split("\n")
    RUSSIAN.write_text("\n".join(lines))


if __name__ == "__main__":
    copy_english_blocks()
