"""Who a staff change is recorded as, spelt one way in every trail (the
engine's, its users' and the site's): "<who> (<where>)"."""

import getpass
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.http import HttpRequest


def actor(request: "HttpRequest | None" = None, *, command: str = "", where: str = "admin") -> str:
    """At the web, the signed-in person and where they acted: "anna (admin)",
    "anna (door)". At the command line, the system's user at its host and the
    command: "deploy@web-1 (manage.py retry)"; the command alone where the
    system has no name for its user (a container without an entry in
    /etc/passwd). At most 150 characters, every trail's column."""
    if request is not None:
        return f"{request.user.get_username()} ({where})"[:150]
    try:
        who = f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # getpass raises whatever the platform's lookup raises
        return f"manage.py {command}"[:150]
    return f"{who} (manage.py {command})"[:150]
