"""Nightjar's admin site: Django's, with the operations desk's pages mounted
where they always were (admin/tickets/registration/delivery-status/, URL
names admin:tickets_delivery_status, admin:tickets_desk_reconcile,
admin:tickets_desk_audit) and an index that opens with the desk's link
(templates/admin/nightjar_index.html). settings install it as `desk.sites.DeskAdminConfig` in django.contrib.admin's place."""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.urls import path

DESK = "tickets/registration/delivery-status/"


class DeskAdminSite(admin.AdminSite):
    index_template = "admin/nightjar_index.html"

    def get_urls(self):
        # Imported here: the site is built while the apps' admin modules load,
        # and the desk's views read the registrations' ModelAdmin.
        from desk import views

        # Before Django's own: the registration admin's catch-all
        # "<path:object_id>/" would take delivery-status/ for an ID.
        return [
            path(DESK, self.admin_view(views.dashboard), name="tickets_delivery_status"),
            path(f"{DESK}reconcile/", self.admin_view(views.reconcile_now), name="tickets_desk_reconcile"),
            path(f"{DESK}audit/", self.admin_view(views.audit_now), name="tickets_desk_audit"),
            *super().get_urls(),
        ]


class DeskAdminConfig(AdminConfig):
    """django.contrib.admin with the desk's site as `admin.site`: every
    `@admin.register` lands on it, and nothing mutates a global site."""

    default_site = "desk.sites.DeskAdminSite"
