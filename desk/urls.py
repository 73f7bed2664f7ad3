from django.urls import path

from nightjar_delivery import views as engine_views

urlpatterns = [
    # The engine's metrics view, for staff who may view registrations (or the scrape token).
    path("metrics", engine_views.metrics, {"permission": "tickets.view_registration"}, name="metrics"),
]
