"""`manage.py parked`: the engine's `nightjar_parked` under the name the site's
learners and guides use (a project of its own has only the prefixed one)."""

from nightjar_delivery.management.commands.nightjar_parked import Command  # noqa: F401
