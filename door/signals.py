"""Repair deletes duplicate tickets through the ORM; the door keeps each one's
digest, so a guest holding a removed ticket hears which one replaced it."""

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from door.models import TicketDigest, digest
from tickets.models import Ticket


@receiver(pre_delete, sender=Ticket, dispatch_uid="door-remember-removed-ticket")
def remember_removed_ticket(sender, instance: Ticket, **kwargs) -> None:
    # Written with the ticket empty: the deletion's own SET_NULL was planned
    # before this signal, so a row made here must not point at the ticket.
    TicketDigest.objects.update_or_create(
        sha256=digest(instance.secret),
        defaults={"ticket": None, "registration_id": instance.registration_id, "number": instance.number},
    )
