"""Health, the engine's half: a queue's counts (or why not), the quorum
queue's replicas in one line, and whether the database and the broker
answer. The user's status pages and commands add their own totals."""

import logging
from typing import Any

from django.db import DatabaseError, connection

from nightjar_delivery import transport

logger = logging.getLogger(__name__)


def queue_status(queue: str) -> tuple[dict[str, Any] | None, str]:
    """(transport.queue_counts(queue), "") or (None, why not): within the broker's deadline."""
    try:
        return transport.queue_counts(queue), ""
    except transport.BrokerError as error:
        return None, str(error)


def describe_replicas(queue: dict[str, Any] | None) -> str:
    """RabbitMQ's quorum queue on a cluster: its leader and which members are
    online, in one line (empty when the broker did not say)."""
    if not queue or not queue.get("members"):
        return ""
    online = [member for member in queue["members"] if member in queue["online"]]
    offline = [member for member in queue["members"] if member not in queue["online"]]
    line = f"leader {queue['leader'] or 'none'}; {len(online)} of {len(queue['members'])} members online"
    line += f" ({', '.join(online) or 'none'})"
    if offline:
        line += f"; offline: {', '.join(offline)}"
    if len(online) * 2 <= len(queue["members"]):
        line += " — no quorum: publishes wait (left for reconcile) until a majority is back"
    return line


def dependency_health() -> dict[str, str]:
    """ "ok" or "unavailable" for the database and the broker, each within its
    own deadline; the reasons go to the log, never to the caller."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError:
        logger.exception("Health check: the database does not answer")
        checks["database"] = "unavailable"
    try:
        transport.ping()
        checks[transport.name().lower()] = "ok"
    except transport.BrokerError as error:
        logger.warning("Health check: %s", error)
        checks[transport.name().lower()] = "unavailable"
    return checks
