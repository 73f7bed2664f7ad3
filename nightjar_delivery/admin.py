"""What the admin of a user's app builds on (nothing is registered here):
ReadOnlyRecordAdmin, for the records only the worker, the services and the
commands write. The admin's plan-then-apply page is nightjar_delivery/admin_plans.py."""

from django.contrib import admin


class ReadOnlyRecordAdmin(admin.ModelAdmin):
    """Rows written by the worker and the services (rejected messages,
    failures, redeliveries, worker reports, staff trails, tasks): staff read
    them, nobody adds, edits or deletes one here. A subclass that offers
    actions on them grants each its own permission (has_<name>_permission)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
