from django.urls import path

from desk import views

urlpatterns = [
    path("metrics", views.metrics_view, name="metrics"),
]
