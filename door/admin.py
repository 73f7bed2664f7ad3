"""The door's rows in the admin, read-only: check-ins and scans are written
by the door's service only (undo is on the arrivals page, with a reason)."""

from django.contrib import admin

from door.models import CheckIn, Scan


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]


@admin.register(CheckIn)
class CheckInAdmin(ReadOnly):
    list_display = ["ticket", "registration", "at", "door", "by"]
    list_filter = ["door"]


@admin.register(Scan)
class ScanAdmin(ReadOnly):
    list_display = ["received", "scan_id", "door", "by", "colour", "sentence", "conflict"]
    list_filter = ["colour", "door", "conflict", "offline"]
