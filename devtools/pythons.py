"""Which Python runs Django 6.x here: the image's pyenv builds of 3.12 and newer
(Debian 12's own python3 is 3.11, and Django 6 needs 3.12), else a python3.12 or
python3.13 on PATH, or PYTHON312 if set. bin/setup-django6 and the wheel test ask
this module, so the search is written once.

    python -m devtools.pythons      # prints the path, or exits 1 saying why
"""

import os
import shutil
import sys
from pathlib import Path


def python312() -> str | None:
    if os.environ.get("PYTHON312"):
        return os.environ["PYTHON312"]
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    builds = sorted(
        (path for path in root.glob("versions/3.*/bin/python") if _minor(path.parent.parent.name) >= 12),
        key=lambda path: _minor(path.parent.parent.name),
    )
    if builds:
        return str(builds[0])
    return shutil.which("python3.12") or shutil.which("python3.13")


def _minor(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "3" and parts[1].isdigit() else 0


if __name__ == "__main__":
    found = python312()
    if not found:
        sys.exit("No Python 3.12 or newer found (pyenv's versions, python3.12 on PATH, or PYTHON312).")
    print(found)
