#!/usr/bin/env python3
"""Django's command-line utility for Nightjar."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nightjar.settings")
    # A fresh terminal in the checkout talks to what bin/run started there
    # (lab mode, its broker, its database): see nightjar/localrun.py.
    from nightjar import localrun

    localrun.load()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
