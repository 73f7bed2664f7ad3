from django.urls import path

from nightjar_delivery import metrics_view

urlpatterns = [
    # The engine's metrics view, for staff who may view registrations (or the scrape token).
    path("metrics", metrics_view, {"permission": "tickets.view_registration"}, name="metrics"),
]
