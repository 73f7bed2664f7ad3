"""The staff admin of registrations, tickets, parked deliveries and the records
(the operations desk's pages are desk/views.py). Actions call the same
services as the management commands; nothing here changes rows on its own."""

from functools import partial

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, Exists, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpResponseRedirect
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from nightjar_delivery import Plan, ReadOnlyRecordAdmin, actor, plan_then_apply, staff_reason, transport
from tickets import contract
from tickets.models import (
    Completion,
    DeliveryFailure,
    Evening,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    Seat,
    StaffAction,
    Ticket,
    WorkerReport,
)
from tickets.services import seats
from tickets.services.history import registration_history
from tickets.services.reconcile import discard_parked, requeue_parked
from tickets.services.registrations import (
    NightjarError,
    is_parked,
    parked_without_ticket,
    pending_registrations,
    retry_registration,
)
from tickets.services.repair import plan_repair, repair_registration
from tickets.services.status import describe_state


def count_of(model, **filters):
    """A correlated COUNT subquery: evaluated only for the rows on the page."""
    rows = model.objects.filter(registration=OuterRef("pk"), **filters).order_by().values("registration")
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n")[:1], output_field=IntegerField()), 0)


# A search box is anonymous-sized input for staff: Django makes one LIKE clause per
# word, so a 4 KB search of 2,000 words scanned every row 2,000 times. Past these
# bounds the rest of the search is ignored (and the page says so).
SEARCH_MAX_CHARACTERS = 200
SEARCH_MAX_WORDS = 8


class BoundedSearch:
    """Keeps the words of a search within SEARCH_MAX_WORDS and SEARCH_MAX_CHARACTERS."""

    def get_search_results(self, request, queryset, search_term):
        words = search_term[:SEARCH_MAX_CHARACTERS].split()
        if len(search_term) > SEARCH_MAX_CHARACTERS or len(words) > SEARCH_MAX_WORDS:
            bounded = " ".join(words[:SEARCH_MAX_WORDS])
            self.message_user(
                request,
                f"Searched for the first {SEARCH_MAX_WORDS} words within {SEARCH_MAX_CHARACTERS} characters only.",
                messages.WARNING,
            )
            search_term = bounded
        return super().get_search_results(request, queryset, search_term)


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [
            ("pending", "pending"),
            ("issued", "ticket issued"),
            ("without_key", "ticket without its key"),
            ("key_only", "key without ticket"),
            ("duplicates", "duplicate tickets"),
            ("parked", "parked"),
            ("waiting", "waiting"),
            ("cancelled", "cancelled"),
            ("rejected", "rejected deliveries"),
        ]

    def queryset(self, request, queryset):
        if self.value() in ("waiting", "cancelled"):
            return queryset.filter(seat=self.value())
        if self.value() not in (None, "rejected"):
            # The ticket states are those of a registration with a seat (one state each: the totals add up).
            queryset = queryset.filter(seat=Seat.CONFIRMED)
        if self.value() == "pending":
            return queryset.filter(pk__in=pending_registrations().values("pk"))
        if self.value() == "parked":
            return queryset.filter(pk__in=parked_without_ticket().values("pk"))
        if self.value() == "issued":
            return queryset.filter(ticket_count=1, completed=True)
        if self.value() == "without_key":
            return queryset.filter(ticket_count=1, completed=False)
        if self.value() == "key_only":
            return queryset.filter(ticket_count=0, completed=True, parked=False)
        if self.value() == "duplicates":
            return queryset.filter(ticket_count__gt=1)
        if self.value() == "rejected":
            return queryset.filter(Exists(RejectedMessage.objects.filter(registration=OuterRef("pk"))))
        return queryset


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class TicketInline(ReadOnlyInline):
    model = Ticket
    fields = readonly_fields = ("number", "name", "issued")


class CompletionInline(ReadOnlyInline):
    model = Completion
    fields = readonly_fields = ("completed",)
    verbose_name = "completion key"


class RejectedInline(ReadOnlyInline):
    model = RejectedMessage
    fields = readonly_fields = ("received", "reason", "body_excerpt", "redelivered")


class ParkedInline(ReadOnlyInline):
    model = ParkedDelivery
    fields = readonly_fields = ("parked", "reason", "attempts", "resolution", "resolved_by")
    verbose_name = "parked delivery"


@admin.register(Registration)
class RegistrationAdmin(BoundedSearch, admin.ModelAdmin):
    list_display = ("code", "name", "state", "ticket_count", "created")
    list_filter = (StateFilter,)
    search_fields = ("name",)
    search_help_text = "Search by registration ID (R-0002) or guest name."
    readonly_fields = ("code", "name", "created", "state", "promoted", "cancelled", "deliveries", "history")
    fields = readonly_fields
    inlines = (TicketInline, CompletionInline, ParkedInline, RejectedInline)
    actions = ("retry_delivery", "repair_duplicate_tickets", "cancel_registrations")
    list_per_page = 100
    show_full_result_count = False  # COUNT(*) over 100,000 rows on every page is wasted work
    change_list_template = "admin/tickets/registration/change_list.html"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                ticket_count=count_of(Ticket),
                rejected_count=count_of(RejectedMessage),
                completed=Exists(Completion.objects.filter(registration=OuterRef("pk"))),
                parked=is_parked(),
            )
        )

    def get_search_results(self, request, queryset, search_term):
        try:
            return queryset.filter(pk=contract.parse_code(search_term.strip())), False
        except contract.ContractError:
            return super().get_search_results(request, queryset, search_term)

    def has_add_permission(self, request):
        return False  # guests register through the site, so every registration is published

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="ID", ordering="pk")
    def code(self, obj):
        return obj.code

    # The annotations come from get_queryset, which the list and the detail page both use.
    @admin.display(description="tickets", ordering="ticket_count")
    def ticket_count(self, obj):
        return obj.ticket_count

    @admin.display(description="state")
    def state(self, obj):
        state = describe_state(tickets=obj.ticket_count, completed=obj.completed, parked=obj.parked, seat=obj.seat)
        return f"{state}, {obj.rejected_count} rejected deliveries" if obj.rejected_count else state

    @staticmethod
    def history_of(obj):
        """(events, summary), read once per page for both fields below."""
        if not hasattr(obj, "_history"):
            obj._history = registration_history(obj)
        return obj._history

    @admin.display(description="deliveries")
    def deliveries(self, obj):
        return self.history_of(obj)[1]

    @admin.display(description="history")
    def history(self, obj):
        """Every attempt, redelivery, republish, parking and staff action, oldest first."""
        events, _ = self.history_of(obj)
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((f"{event.at:%Y-%m-%d %H:%M:%S.%f}"[:-3], event.what, event.detail) for event in events),
        )
        return format_html(
            '<table class="history"><thead><tr><th>when (UTC)</th><th>what</th><th>detail</th></tr></thead>'
            "<tbody>{}</tbody></table>",
            rows,
        )

    # Both actions change what happens to a registration: a view-only user may not run them.
    @admin.action(description="Retry delivery", permissions=["change"])
    def retry_delivery(self, request, queryset):
        done = []
        for registration in queryset:
            try:
                retry_registration(code=registration.code, actor=actor(request))
            except (NightjarError, transport.BrokerError) as error:
                self.message_user(request, f"{registration.code} not retried: {error}", messages.ERROR)
                continue
            done.append(registration.code)
        if done:
            self.message_user(request, f"Published a new delivery of {', '.join(done)}.", messages.SUCCESS)

    @admin.action(description="Repair duplicate tickets", permissions=["change"])
    def repair_duplicate_tickets(self, request, queryset):
        """First show the plans; apply them only when staff confirm."""
        registrations, steps, refusals = list(queryset.order_by("pk")[:200]), [], []
        for registration in registrations:
            try:
                plan = plan_repair(code=registration.code)
            except NightjarError as error:
                refusals.append(str(error))
                continue
            steps.append(("\n".join(plan.lines()), partial(self.repair, request, registration.code)))
        plan = Plan(
            action="repair_duplicate_tickets",
            title="Repair duplicate tickets",
            steps=steps,
            selected=[r.pk for r in registrations],
            nothing="Nothing to repair among the selected registrations.",
            confirm="apply",
            button="Apply the repair",
            set_aside=refusals,
            set_aside_heading="Refused:",
        )
        return plan_then_apply(self, request, plan)

    def repair(self, request, code: str) -> str:
        return f"{code}: {repair_registration(code=code, actor=actor(request)).summary()}."

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("tickets.cancel_registration")

    @admin.action(description="Cancel registrations (their seats go to the waiting list)", permissions=["cancel"])
    def cancel_registrations(self, request, queryset):
        """Show the plan and ask for a reason; cancel only when staff confirm."""
        chosen = list(queryset.order_by("pk")[:200])
        registrations = [r for r in chosen if r.seat != Seat.CANCELLED]
        plan = Plan(
            action="cancel_registrations",
            title="Cancel registrations",
            steps=[
                (f"{r.code} {r.name} ({r.get_seat_display()})", partial(self.cancel, request, r)) for r in registrations
            ],
            selected=[r.pk for r in chosen],
            nothing="Every selected registration is already cancelled; there is nothing to cancel.",
            set_aside=self.already_cancelled([r for r in chosen if r.seat == Seat.CANCELLED]),
            set_aside_heading="Already cancelled, left alone:",
            confirm="cancel",
            button="Yes, cancel",
            note="A freed seat goes to the first guest on the waiting list, and their ticket is published.",
            reason_label="Reason (kept in the staff trail; required)",
            no_reason="Give a reason for the cancellation; nothing was cancelled.",
        )
        return plan_then_apply(self, request, plan)

    @staticmethod
    def already_cancelled(registrations) -> list[str]:
        """Each one as staff read it: who cancelled it, and when (the staff trail's last cancel)."""
        last = {}
        for row in StaffAction.objects.filter(action="cancel", registration__in=registrations).order_by("at"):
            last[row.registration_id] = row
        lines = []
        for r in registrations:
            row = last.get(r.pk)
            by = f", by {row.actor} at {timezone.localtime(row.at):%H:%M:%S}" if row else ""
            lines.append(f"{r.code} {r.name} (cancelled{by})")
        return lines

    def cancel(self, request, registration) -> str:
        try:
            done = seats.cancel_registration(
                registration=registration, actor=actor(request), reason=staff_reason(request)
            )
        except seats.AlreadyCancelled as error:
            # Cancelled between the plan and the confirmation (the guest's own link).
            raise seats.AlreadyCancelled(f"{error} The reason you gave was not recorded: nothing needed it.") from None
        given = ", ".join(r.code for r in done.promoted)
        return f"{registration.code} cancelled" + (f"; its seat went to {given}." if given else ".")


class EveningForm(forms.ModelForm):
    # Text, so a capacity of "twenty" or "-5" gets seats.parse_capacity's sentence, not a generic one.
    capacity = forms.CharField(
        required=False,
        max_length=20,
        help_text="Seats for the evening. Empty: room for everyone. Raising it gives the new seats to the "
        "waiting list in order; it cannot go below the seats taken.",
    )

    class Meta:
        model = Evening
        fields = ("capacity",)

    def clean_capacity(self):
        try:
            capacity = seats.parse_capacity(self.cleaned_data["capacity"])
        except NightjarError as error:
            raise forms.ValidationError(str(error)) from None
        if capacity is not None and capacity < (taken := seats.seats_taken()):
            raise forms.ValidationError(
                f"{taken} seats are taken, so the capacity cannot be {capacity}; "
                f"choose at least {taken}, or cancel registrations first."
            )
        return capacity


@admin.register(Evening)
class EveningAdmin(admin.ModelAdmin):
    """The capacity, changed through seats.set_capacity (the lock, the
    refusal below the seats taken, the promotions, the staff trail)."""

    form = EveningForm
    list_display = ("__str__", "taken", "waiting")
    readonly_fields = ("taken", "waiting")

    def has_add_permission(self, request):
        return False  # one evening (seats.locked_capacity makes its row)

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="seats taken")
    def taken(self, obj):
        return seats.seats_taken()

    @admin.display(description="waiting list")
    def waiting(self, obj):
        return Registration.objects.filter(seat=Seat.WAITING).count()

    def save_model(self, request, obj, form, change):
        try:
            promoted = seats.set_capacity(capacity=obj.capacity, actor=actor(request))
        except NightjarError as error:  # the form checked; the lock decided otherwise (a registration came in)
            request.capacity_refused = str(error)
            return
        if promoted:
            self.message_user(request, f"Seats given to {', '.join(r.code for r in promoted)}.", messages.SUCCESS)

    def response_change(self, request, obj):
        if refused := getattr(request, "capacity_refused", ""):
            self.message_user(request, f"Capacity not changed: {refused}", messages.ERROR)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)


@admin.register(Ticket)
class TicketAdmin(BoundedSearch, admin.ModelAdmin):
    list_display = ("number", "registration", "name", "issued")
    list_select_related = ("registration",)
    search_fields = ("name",)
    readonly_fields = ("registration", "name", "issued")
    show_full_result_count = False

    def has_add_permission(self, request):
        return False  # tickets are made by the worker only

    def has_delete_permission(self, request, obj=None):
        # Deleting a ticket would leave its completion key, and no worker would
        # make it again: extra tickets go through "Repair duplicate tickets".
        return False


class RecordAdmin(BoundedSearch, ReadOnlyRecordAdmin):
    """Records written by the worker and the services: staff read them, nobody edits them."""


@admin.register(Completion)
class CompletionAdmin(RecordAdmin):
    list_display = ("registration", "completed")
    list_select_related = ("registration",)
    show_full_result_count = False


@admin.register(RejectedMessage)
class RejectedMessageAdmin(RecordAdmin):
    list_display = ("received", "reason", "registration", "body_size", "redelivered")
    list_select_related = ("registration",)
    list_filter = ("redelivered",)
    search_fields = ("reason",)
    readonly_fields = (
        "received",
        "reason",
        "body_excerpt",
        "body_size",
        "body_sha256",
        "registration",
        "message_id",
        "redelivered",
    )


@admin.register(ParkedDelivery)
class ParkedDeliveryAdmin(BoundedSearch, admin.ModelAdmin):
    """The parked desk: what used up its delivery limit, with the reason.
    Requeue publishes it again; discard gives up on it. Both show what they
    will do first, and leave a trace."""

    list_display = ("parked", "registration", "reason", "attempts", "resolution", "resolved_by")
    list_select_related = ("registration",)
    list_filter = ("resolution",)
    search_fields = ("reason",)
    readonly_fields = (
        "registration",
        "parked",
        "reason",
        "attempts",
        "body_excerpt",
        "body_sha256",
        "resolution",
        "resolved_by",
        "resolved_at",
    )
    actions = ("requeue", "discard")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Requeue: publish again", permissions=["change"])
    def requeue(self, request, queryset):
        return self.plan(request, queryset, "requeue", requeue_parked, "publish again")

    @admin.action(description="Discard: give up on it", permissions=["change"])
    def discard(self, request, queryset):
        return self.plan(request, queryset, "discard", discard_parked, "give up on (no ticket)")

    def plan(self, request, queryset, action: str, service, what: str):
        chosen = {p.registration for p in queryset.select_related("registration") if p.registration}

        def change(registration) -> str:
            service(registration, actor=actor(request))
            return f"{registration.code}: {action}d."

        plan = Plan(
            action=action,
            title=f"{action.capitalize()} parked deliveries",
            steps=[(f"{r.code}: {what}", partial(change, r)) for r in sorted(chosen, key=lambda r: r.code)],
            selected=list(queryset.values_list("pk", flat=True)),
            nothing=f"None of the selected deliveries names a registration; there is nothing to {action}.",
        )
        return plan_then_apply(self, request, plan)


@admin.register(DeliveryFailure)
class DeliveryFailureAdmin(RecordAdmin):
    list_display = ("at", "registration", "worker", "error")
    list_select_related = ("registration",)
    search_fields = ("error",)
    readonly_fields = ("at", "registration", "worker", "error")
    show_full_result_count = False


@admin.register(Redelivery)
class RedeliveryAdmin(RecordAdmin):
    list_display = ("at", "registration", "delivery", "worker")
    list_select_related = ("registration",)
    show_full_result_count = False


@admin.register(StaffAction)
class StaffActionAdmin(RecordAdmin):
    list_display = ("at", "actor", "action", "registration", "detail")
    list_select_related = ("registration",)
    list_filter = ("action",)
    show_full_result_count = False


@admin.register(WorkerReport)
class WorkerReportAdmin(RecordAdmin):
    list_display = ("name", "state_now", "mode", "transport", "started", "last_seen", "handled", "failed")
    search_fields = ("name", "host")

    @admin.display(description="state")
    def state_now(self, obj):
        return obj.state(gone_after=settings.NIGHTJAR_WORKER_GONE_SECONDS)
