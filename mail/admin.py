"""The outbox in the admin: every mail with its state and the mail server's
last sentence, read-only; a resend action (its own permission, a plan first,
the staff trail); and a registration's page showing its mails."""

from functools import partial

from django.contrib import admin

from mail.models import Mail
from mail.staff import plan_resend, resend_mail
from nightjar_delivery import Plan, actor, plan_then_apply
from tickets.admin import ReadOnlyInline, RegistrationAdmin
from tickets.models import Registration
from tickets.services.registrations import NightjarError


@admin.register(Mail)
class MailAdmin(admin.ModelAdmin):
    list_display = ("registration", "kind", "address", "state", "attempts", "last_reply", "created", "sent")
    list_filter = ("state", "kind")
    search_fields = ("address", "message_id")
    search_help_text = "Search by address or Message-ID."
    readonly_fields = (
        "registration",
        "kind",
        "address",
        "message_id",
        "place",
        "state",
        "attempts",
        "next_attempt",
        "last_reply",
        "created",
        "sent",
    )
    fields = readonly_fields
    actions = ("resend",)
    list_select_related = ("registration",)
    list_per_page = 100
    show_full_result_count = False

    def has_add_permission(self, request):
        return False  # a mail is stored with its fact, never by hand

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_resend_permission(self, request) -> bool:
        return request.user.has_perm("mail.resend_mail")

    @admin.action(description="Send again (a failed mail, or one the guest never got)", permissions=["resend"])
    def resend(self, request, queryset):
        """Show the plan; store the new mails only when staff confirm."""
        mails, steps, refusals = list(queryset.select_related("registration").order_by("pk")[:200]), [], []
        for mail in mails:
            try:
                steps.append((plan_resend(mail), partial(self.resend_one, request, mail.pk)))
            except NightjarError as error:
                refusals.append(str(error))
        plan = Plan(
            action="resend",
            title="Send mails again",
            steps=steps,
            selected=[mail.pk for mail in mails],
            nothing="None of the selected mails can be sent again.",
            confirm="resend",
            button="Yes, send again",
            note="Each is a new mail with its own Message-ID; the sender sends it within a few seconds.",
            set_aside=refusals,
            set_aside_heading="Not resent:",
        )
        return plan_then_apply(self, request, plan)

    def resend_one(self, request, mail_id: int) -> str:
        mail = resend_mail(mail_id=mail_id, actor=actor(request))
        return f"{mail.registration.code}: {mail.get_kind_display()} stored again for {mail.address}."


class MailInline(ReadOnlyInline):
    model = Mail
    fields = readonly_fields = ("kind", "address", "state", "attempts", "last_reply", "created", "sent")
    show_change_link = True
    verbose_name = "mail to the guest"
    verbose_name_plural = "mails to the guest"


# The registrations' admin, with their mails: the tickets app knows nothing of mail.
admin.site.unregister(Registration)


@admin.register(Registration)
class RegistrationWithMailsAdmin(RegistrationAdmin):
    inlines = (*RegistrationAdmin.inlines, MailInline)
    readonly_fields = (*RegistrationAdmin.readonly_fields, "email")
    fields = readonly_fields
