"""Nightjar's URLs and one guest URL whose view fails: a 500 with the secret
in its path and in the exception's message (tests/test_hostile_traffic.py)."""

from django.urls import include, path


def failing_view(request, code, secret):
    raise RuntimeError(f"Forced failure for {request.path}")


urlpatterns = [path("registrations/<str:code>/<str:secret>/fail/", failing_view), path("", include("nightjar.urls"))]
