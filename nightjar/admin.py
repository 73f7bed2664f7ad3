"""Staff sessions in the admin: who is signed in, since when, last seen from
where, read-only (nightjar.view_staffsession), and "End these sessions" with
its plan first (nightjar.end_staffsession), for a lost door phone."""

from functools import partial

from django.contrib import admin

from nightjar.models import StaffSession
from nightjar.staffsessions import describe, end_staff_session
from nightjar_delivery import Plan, actor, plan_then_apply


@admin.register(StaffSession)
class StaffSessionAdmin(admin.ModelAdmin):
    list_display = ("user", "started", "last_seen", "address")
    list_display_links = None  # nothing to open: the list is the whole of it
    list_select_related = ("user",)
    ordering = ("-last_seen",)
    search_fields = ("user__username", "address")
    show_full_result_count = False
    actions = ("end_sessions",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_end_permission(self, request) -> bool:
        return request.user.has_perm("nightjar.end_staffsession")

    @admin.action(description="End these sessions (signed out at their next request)", permissions=["end"])
    def end_sessions(self, request, queryset):
        chosen = list(queryset.select_related("user").order_by("-last_seen")[:200])
        who = actor(request)
        plan = Plan(
            action="end_sessions",
            title="End staff sessions",
            steps=[(f"End {describe(s)}", partial(end_staff_session, token=s.token, actor=who)) for s in chosen],
            selected=[s.pk for s in chosen],
            nothing="None of the selected sessions is still signed in; there is nothing to end.",
            button="Yes, end them",
            note="Whoever holds such a session is signed out at their next request, and must sign in again.",
        )
        return plan_then_apply(self, request, plan)
