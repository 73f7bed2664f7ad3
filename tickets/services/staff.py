"""The trace of every staff change (who, what, when): written in the same
transaction as the change it records. Who is spelt by nightjar_delivery.actor."""

from tickets.models import Registration, StaffAction


def record_staff_action(*, actor: str, action: str, registration: Registration | None, detail: str = "") -> None:
    StaffAction.objects.create(actor=actor[:150], action=action, registration=registration, detail=detail[:500])
