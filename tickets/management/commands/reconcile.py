"""`manage.py reconcile`: the engine's `nightjar_reconcile` under the name the site's
learners and guides use (a project of its own has only the prefixed one)."""

from nightjar_delivery.management.commands.nightjar_reconcile import Command  # noqa: F401
