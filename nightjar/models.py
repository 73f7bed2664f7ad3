"""What the site's own middleware keeps in the database: the rate limit's
counts, shared by every web process on every machine, and the staff sessions
that sign-out ends."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class RateCount(models.Model):
    """One key's requests (or scans) in one minute. Incremented by one
    upsert (nightjar/ratelimit.py), so concurrent processes never lose a count."""

    key = models.CharField(max_length=200)
    minute = models.BigIntegerField()  # seconds since the epoch // 60
    count = models.PositiveIntegerField(default=0)

    class Meta:
        # The upsert's conflict target: one row per key and minute.
        constraints = [models.UniqueConstraint(fields=["key", "minute"], name="nightjar_rate_key_minute")]

    def __str__(self) -> str:
        return f"{self.key} at minute {self.minute}: {self.count}"


class StaffSession(models.Model):
    """A signed-in staff session, by the random token its cookie carries:
    signing out deletes the row, and a cookie whose row is gone is signed out
    (sessions are signed cookies, which the server cannot otherwise revoke).
    Staff with the permission see them all and end one (a lost door phone)."""

    token = models.CharField(max_length=64, primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    started = models.DateTimeField(auto_now_add=True)
    # Rewritten at most once a minute by the middleware; the sweep of expired rows reads it.
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)
    address = models.CharField(max_length=64, blank=True)  # the client address it was last seen from

    class Meta:
        permissions = [("end_staffsession", "Can end a signed-in staff session")]

    def __str__(self) -> str:
        return f"session of user {self.user_id} since {self.started:%Y-%m-%d %H:%M}"
