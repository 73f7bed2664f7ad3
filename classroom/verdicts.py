"""The one verdict type: a verify_handler scenario or a `lab check` check.

verify_handler's scenarios run in a child process (classroom/verify.py); it
writes each verdict as data, one JSON line in a file the parent names, before
it prints the verdict's line, and the parent reads the data back (the printed
lines are for people, never parsed).
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Verdict:
    name: str
    passed: bool
    reason: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.reason}"


def write(path: str | Path, verdict: Verdict) -> None:
    """Append one verdict; the line is on disk before this returns."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(asdict(verdict)) + "\n")


class Reader:
    """The verdicts written to `path`, each once, in order: new() returns those
    completed since its last call (a line still being written waits)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0

    def new(self) -> list[Verdict]:
        with open(self.path, "rb") as file:
            file.seek(self.offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [Verdict(**json.loads(line)) for line in complete.splitlines()]
