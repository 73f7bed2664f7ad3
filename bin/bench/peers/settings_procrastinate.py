"""procrastinate 3.10 for the tasks section, on the PostgreSQL leg only (its
queue is PostgreSQL itself): its Django integration on the benchmark's
database and Nightjar's own database options, its one task in
procrastinate_tasks.py (no autodiscovery: the project's apps define no
procrastinate tasks). nightjar_tasks stays the TASKS backend, unused here."""

from nightjar.settings import *  # noqa: F403
from nightjar.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "procrastinate.contrib.django"]
PROCRASTINATE_AUTODISCOVER_MODULE_NAME = ""
PROCRASTINATE_IMPORT_PATHS = ["bench.peers.procrastinate_tasks"]
