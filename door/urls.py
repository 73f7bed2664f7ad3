from django.urls import path

from door import views

urlpatterns = [
    path("", views.door_page, name="door"),
    path("scan.json", views.scan_json, name="door-scan"),
    path("sync.json", views.sync_json, name="door-sync"),
    path("tickets.json", views.tickets_json, name="door-tickets"),
    path("arrivals/", views.arrivals_page, name="door-arrivals"),
]
