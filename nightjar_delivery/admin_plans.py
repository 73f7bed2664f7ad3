"""The admin's plan-then-apply, for any app's staff actions on its records.

An admin action that changes something (requeue, discard, repair, cancel)
first shows staff its plan — one line per change, and what it leaves alone —
and applies it only when they confirm on that page; each change runs through
the app's own service, and a refusal (a channel.DomainError) is one error
message that does not stop the others:

    @admin.action(description="Requeue: publish again", permissions=["change"])
    def requeue(self, request, queryset):
        steps = [(f"{p.code}: publish again", partial(requeue_parked, p.registration, actor=...)) for p in ...]
        return admin_plans.plan_then_apply(self, request, admin_plans.Plan(
            action="requeue", title="Requeue parked deliveries", steps=steps,
            selected=[p.pk for p in queryset], nothing="Nothing to requeue."))

A step's callable returns the success line it is reported with.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse

from nightjar_delivery.channel import DomainError

REASON_LENGTH = 400


@dataclass
class Plan:
    action: str  # the admin action's name: the confirmation posts it back
    title: str
    steps: list[tuple[str, Callable[[], str]]]  # (what staff read, the change: returns its success line)
    selected: list  # the chosen rows' primary keys, carried through the confirmation
    nothing: str  # the sentence when there is no step
    confirm: str = ""  # the confirmation's value (default: the action's name)
    button: str = ""  # the submit button (default: "Yes, <action>")
    set_aside: list[str] = field(default_factory=list)  # named and left alone, under set_aside_heading
    set_aside_heading: str = ""
    note: str = ""  # a sentence under the plan
    reason_label: str = ""  # asks for a required reason when set (read it with reason())
    no_reason: str = ""  # the sentence when staff confirmed without one


def reason(request) -> str:
    """The reason staff gave on the plan's page (trimmed; at most 400 characters)."""
    return request.POST.get("reason", "").strip()[:REASON_LENGTH]


def plan_then_apply(model_admin, request, plan: Plan) -> TemplateResponse | None:
    """Confirmed: each step's change, reported one message each; else the plan's page.
    Confirmed with no step left (done meanwhile, by a guest or other staff):
    the plan's `nothing` sentence, never a silent redirect."""
    confirmed = request.POST.get("confirm") == (plan.confirm or plan.action)
    if confirmed and not plan.steps:
        unused = (
            " The reason you gave was not recorded: nothing needed it." if plan.reason_label and reason(request) else ""
        )
        model_admin.message_user(request, plan.nothing + unused, messages.WARNING)
        for line in plan.set_aside:
            model_admin.message_user(request, f"{plan.set_aside_heading} {line}", messages.WARNING)
        return None
    if confirmed and plan.reason_label and not reason(request):
        model_admin.message_user(request, plan.no_reason, messages.ERROR)
    elif confirmed:
        for _line, change in plan.steps:
            try:
                model_admin.message_user(request, change(), messages.SUCCESS)
            except DomainError as error:
                model_admin.message_user(request, str(error), messages.ERROR)
        for line in plan.set_aside:
            model_admin.message_user(request, f"{plan.set_aside_heading} {line}", messages.WARNING)
        return None
    context = {
        **model_admin.admin_site.each_context(request),
        "plan": plan,
        "title": plan.title,
        "lines": [line for line, _change in plan.steps],
        "confirm": plan.confirm or plan.action,
        "button": plan.button or f"Yes, {plan.action}",
        "reason": reason(request),
        "reason_length": REASON_LENGTH,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/nightjar_delivery/plan.html", context)
