from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("door/", include("door.urls")),
    path("", include("desk.urls")),
    path("", include("tickets.urls")),
]
