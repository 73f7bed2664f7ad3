#!/usr/bin/env python
"""The tasks demo's manage.py: a Django project of its own that uses Nightjar's
engine (nightjar_delivery/) and its Django Tasks backend (nightjar_tasks/) from this
repository, as another project would once they are installed."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent

if __name__ == "__main__":
    # The two apps are not on PyPI: the repository's root is on the path instead.
    sys.path[:0] = [str(HERE), str(REPOSITORY)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasks_demo.settings")
    # A fresh terminal uses what `run` started here (nightjar/localrun.py:
    # only while that `run` is alive; the environment wins).
    os.environ.setdefault("NIGHTJAR_RUN_FILE", str(HERE / ".run" / "local.env"))
    from nightjar import localrun

    localrun.load(os.environ)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
