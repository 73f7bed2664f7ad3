"""The door's rows: what was scanned, who is in, and the digests tickets are
found by. The door reads the ticket domain; nothing there knows the door."""

import hashlib

from django.db import models
from django.utils import timezone

from tickets.models import Registration, Ticket

# A ticket's secret is 43 URL-safe characters; anything much longer is not ours.
MAX_PAYLOAD = 64


def digest(secret: str) -> str:
    """What the door stores and sends to phones instead of a secret: its SHA-256."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


class TicketDigest(models.Model):
    """A ticket as the door finds it: by the SHA-256 of its secret. Filled in
    lazily from the tickets table (the worker's INSERT sends no signal); a
    ticket that repair removes keeps its row with `ticket` empty, so its
    scan can say which ticket replaced it."""

    # The door's lookup of a scanned code (one index probe, then compare_digest).
    sha256 = models.CharField(max_length=64, unique=True)
    ticket = models.OneToOneField(Ticket, null=True, blank=True, on_delete=models.SET_NULL, related_name="door_digest")
    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="+")
    number = models.CharField(max_length=20)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.number} ({'replaced' if self.ticket_id is None else 'valid'})"


class Scan(models.Model):
    """Every scan the door received, whatever it said: the trace of who
    scanned what, where and when. The only row a red answer writes."""

    GREEN, AMBER, RED = "green", "amber", "red"
    COLOURS = [(GREEN, "welcome"), (AMBER, "already in"), (RED, "refused")]

    # A scan sent again (retry, offline sync repeated) finds its answer by this id.
    scan_id = models.CharField(max_length=64, unique=True)
    by = models.CharField(max_length=150)
    door = models.CharField(max_length=40)
    scanned = models.DateTimeField(default=timezone.now)  # on the device (offline scans arrive later)
    received = models.DateTimeField(default=timezone.now)
    colour = models.CharField(max_length=10, choices=COLOURS)
    sentence = models.CharField(max_length=300)  # the headline: "Welcome, Mina Patel"
    detail = models.CharField(max_length=300, blank=True)  # the line under it
    ticket = models.ForeignKey(Ticket, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    offline = models.BooleanField(default=False)
    # An offline door let the guest in, but another scan had checked the ticket in first.
    conflict = models.BooleanField(default=False)
    # The SHA-256 of what was scanned (never the code itself): the same scan id sent
    # again with another code is refused, not answered with the first scan's verdict.
    code_sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-received", "-id"]

    def __str__(self) -> str:
        return f"scan {self.scan_id} at {self.door}: {self.colour}"


class CheckIn(models.Model):
    """The guest is in: one row per ticket, written in the same transaction
    as the scan that made it. The first scan wins; undo deletes the row."""

    # One check-in per ticket, whatever the number of doors or retries.
    ticket = models.OneToOneField(Ticket, on_delete=models.CASCADE, related_name="check_in")
    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now, db_index=True)  # the desk's arrivals per minute
    door = models.CharField(max_length=40)
    by = models.CharField(max_length=150)
    scan = models.OneToOneField(Scan, on_delete=models.PROTECT, related_name="check_in")

    class Meta:
        ordering = ["-at", "-id"]
        permissions = [("check_in", "Can check guests in at the door")]

    def __str__(self) -> str:
        return f"check-in {self.ticket.number} at {self.door}"
