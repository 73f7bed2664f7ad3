"""The lab's demo data: Mina Patel's R-0001 with her ticket, and the lab's
reset back to it."""

from django.core.management.color import no_style
from django.db import connection, transaction

from nightjar_delivery import transport
from tickets import conf
from tickets.models import (
    Completion,
    DeliveryFailure,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    StaffAction,
    Ticket,
    WorkerReport,
)
from tickets.services.registrations import NightjarError

DEMO_NAME = "Mina Patel"


def seed_demo() -> tuple[Registration, bool]:
    """Mina Patel, R-0001, with her ticket. Returns (registration, created);
    running it again changes nothing."""
    with transaction.atomic():
        registration, created = Registration.objects.get_or_create(pk=1, defaults={"name": DEMO_NAME})
        if not created and registration.name != DEMO_NAME:
            raise NightjarError(f"R-0001 already belongs to {registration.name}; the demo data was not loaded.")
        if created:
            # An explicit key does not move PostgreSQL's sequence; move it past R-0001.
            with connection.cursor() as cursor:
                for statement in connection.ops.sequence_reset_sql(no_style(), [Registration]):
                    cursor.execute(statement)
            Completion.objects.create(registration=registration)
            Ticket.objects.create(registration=registration, name=registration.name)
    return registration, created


def reset_demo() -> int:
    """Lab only: delete every registration but Mina Patel's (with their
    tickets, keys and records), forget the workers' reports (status then lists
    the workers since the reset: the lab's Redis part starts with one, and the
    RabbitMQ part's workers are no part of it), restart the numbering after
    R-0001 and T-0001, and empty the queues. Returns how many registrations went."""
    others = Registration.objects.exclude(pk=1)
    count = others.count()
    with transaction.atomic():
        for model in (StaffAction, DeliveryFailure, Redelivery, ParkedDelivery, RejectedMessage, Ticket, Completion):
            model.objects.exclude(registration_id=1).delete()
        Ticket.objects.filter(registration_id=1).exclude(
            pk=Ticket.objects.filter(registration_id=1).order_by("pk").values("pk")[:1]
        ).delete()
        others.delete()
        WorkerReport.objects.all().delete()
        seed_demo()
        _restart_numbering([Registration, Ticket])
    transport.purge_queues(conf.NIGHTJAR_QUEUE)
    return count


def _restart_numbering(models) -> None:
    """The next row gets max(id) + 1, so the lab's outputs (R-0002...) hold again."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for model in models:
                table = model._meta.db_table
                cursor.execute(
                    f"UPDATE sqlite_sequence SET seq = (SELECT COALESCE(MAX(id), 0) FROM {table}) WHERE name = %s",
                    [table],
                )
        else:
            for statement in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(statement)
