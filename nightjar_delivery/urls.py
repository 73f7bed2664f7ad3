"""`include("nightjar_delivery.urls")` under the path a project's scraper asks: the metrics view."""

from django.urls import path

from nightjar_delivery import views

urlpatterns = [path("", views.metrics, name="nightjar-metrics")]
