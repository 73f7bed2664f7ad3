from django.contrib import admin

from tickets.models import Completion, Registration, RejectedMessage, Ticket


@admin.register(Registration)
class RegistrationAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "created"]
    search_fields = ["name"]


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ["number", "registration", "name", "issued"]
    list_select_related = ["registration"]


@admin.register(Completion)
class CompletionAdmin(admin.ModelAdmin):
    list_display = ["registration", "completed"]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(RejectedMessage)
class RejectedMessageAdmin(admin.ModelAdmin):
    list_display = ["received", "reason", "registration", "redelivered"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
