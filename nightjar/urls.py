from django.contrib import admin
from django.urls import include, path

from nightjar import signin

urlpatterns = [
    path("admin/login/", signin.sign_in),  # the admin's own login, behind the limit of failed sign-ins
    path("admin/", admin.site.urls),
    path("door/", include("door.urls")),
    path("", include("desk.urls")),
    path("", include("tickets.urls")),
]
