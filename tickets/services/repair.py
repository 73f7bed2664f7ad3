"""Repair: a registration with duplicate tickets or a key without its ticket
is brought back to exactly one ticket and its key, planned first, applied in
one transaction with its trace."""

from dataclasses import dataclass, field

from django.db import transaction

from tickets.models import Completion, Registration, Ticket
from tickets.services.registrations import NightjarError, find_registration
from tickets.services.staff import record_staff_action
from tickets.services.tickets import issue_ticket


class RepairRefused(NightjarError):
    pass


@dataclass
class RepairPlan:
    registration: Registration
    keep: Ticket | None
    delete: list[Ticket] = field(default_factory=list)
    completion_exists: bool = True
    applied: bool = False

    def lines(self) -> list[str]:
        code = self.registration.code
        lines = [f"Repair plan for {code} ({self.registration.name}):"]
        if self.keep is None:
            lines.append("  issue the missing ticket (the completion key is there, its ticket was deleted)")
        else:
            lines.append(f"  keep the earliest ticket {self.keep.number} (issued {self.keep.issued:%Y-%m-%d %H:%M:%S})")
        if self.delete:
            lines.append(f"  delete extra tickets: {', '.join(t.number for t in self.delete)}")
        else:
            lines.append("  delete extra tickets: none")
        key = "present" if self.completion_exists else "missing, will be created"
        lines.append(f"  completion key {code}: {key}")
        return lines

    def summary(self) -> str:
        if self.keep is None:
            return "issued the missing ticket"
        deleted = ", ".join(t.number for t in self.delete) or "none"
        return f"kept {self.keep.number}, deleted {deleted}"


def plan_repair(*, code: str) -> RepairPlan:
    """What repair would do to a registration's tickets; changes nothing."""
    return _plan(find_registration(code=code))


def _plan(registration: Registration) -> RepairPlan:
    tickets = list(registration.tickets_in_order())
    completion_exists = Completion.objects.filter(registration=registration).exists()
    if not tickets and not completion_exists:
        raise RepairRefused(
            f"{registration.code} has no ticket yet; there is nothing to repair. Run the worker or retry it."
        )
    for ticket in tickets:
        if ticket.name != registration.name:
            raise RepairRefused(
                f"Ticket {ticket.number} of {registration.code} is for {ticket.name!r}, but the registration "
                f"is for {registration.name!r}; repair will not guess which is right."
            )
    # A key without a ticket (its ticket was deleted): no worker would ever
    # make it again, so repair issues it.
    return RepairPlan(
        registration=registration,
        keep=tickets[0] if tickets else None,
        delete=tickets[1:],
        completion_exists=completion_exists,
    )


def repair_registration(*, code: str, actor: str) -> RepairPlan:
    """Keep the earliest ticket (or issue the missing one), delete the extra
    ones and make sure the completion key exists, all in one transaction with
    its trace."""
    with transaction.atomic():
        # Lock the registration so a worker cannot add a ticket mid-repair.
        registration = find_registration(code=code)
        Registration.objects.select_for_update().filter(pk=registration.pk).exists()
        plan = _plan(registration)
        Ticket.objects.filter(pk__in=[ticket.pk for ticket in plan.delete]).delete()
        if plan.keep is None:
            issue_ticket(registration_id=registration.pk, name=registration.name)
        Completion.objects.get_or_create(registration=plan.registration)
        record_staff_action(actor=actor, action="repair", registration=registration, detail=plan.summary())
        plan.applied = True
    return plan
