"""`manage.py worker`: the engine's `nightjar_worker` under the name the site's
learners and guides use (a project of its own has only the prefixed one)."""

from nightjar_delivery.management.commands.nightjar_worker import Command  # noqa: F401
