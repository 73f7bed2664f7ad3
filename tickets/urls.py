from django.urls import path

from tickets import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz_ready, name="healthz"),
    path("healthz/live", views.healthz_live, name="healthz-live"),
    path("healthz/ready", views.healthz_ready, name="healthz-ready"),
    path("visit/", views.visit, name="visit"),
    path("evening/", views.evening, name="evening"),
    path("registrations/", views.registration_list, name="registration-list"),
    path("registrations/<str:code>/<str:secret>/", views.registration_detail, name="registration"),
    path("registrations/<str:code>/<str:secret>/status.json", views.registration_status, name="registration-status"),
    path("registrations/<str:code>/<str:secret>/cancel/", views.registration_cancel, name="registration-cancel"),
    path("registrations/<str:code>/<str:secret>/ticket/", views.ticket_detail, name="ticket"),
    path("registrations/<str:code>/<str:secret>/ticket/download/", views.ticket_download, name="ticket-download"),
]
