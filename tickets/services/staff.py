"""The trace of every staff change (who, what, when): written in the same
transaction as the change it records."""

import getpass
import socket

from tickets.models import Registration, StaffAction


def command_line_actor(command: str) -> str:
    """Who ran a management command, as the trace names them."""
    return f"{getpass.getuser()}@{socket.gethostname()} (manage.py {command})"


def record_staff_action(*, actor: str, action: str, registration: Registration | None, detail: str = "") -> None:
    StaffAction.objects.create(actor=actor[:150], action=action, registration=registration, detail=detail[:500])
