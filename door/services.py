"""The door's state changes: a scan checks a guest in (once), staff undo a
check-in made by mistake; and what the door and the desk read (the digests a
phone judges offline scans by, the arrivals)."""

import hmac
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.crypto import salted_hmac

from door.models import MAX_PAYLOAD, CheckIn, Scan, TicketDigest, digest
from nightjar_delivery import storable_text
from tickets.models import Registration, Seat, Ticket
from tickets.services.registrations import NightjarError
from tickets.services.staff import record_staff_action

NOT_OURS = "Not a ticket for this evening"
SECRET_LENGTH = 43  # 32 random bytes, URL-safe base64 without padding (tickets.models.new_secrets)
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")
# What staff type when the camera cannot read: T-0001, R-0001, or the bare number of a ticket.
TYPED = re.compile(r"(?:(?P<kind>[TtRr])-?)?(?P<number>[0-9]{1,9})")
SCAN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# An offline scan's own clock is believed within this much of the server's.
CLOCK_SLACK = timedelta(days=1)


class DoorError(NightjarError):
    """A request the door cannot act on (no scan id, no reason for an undo)."""


@dataclass
class Verdict:
    colour: str
    sentence: str
    detail: str = ""
    ticket: Ticket | None = None


@dataclass
class Answer:
    """What the door page shows and the JSON endpoint returns."""

    scan_id: str
    colour: str
    sentence: str
    detail: str
    name: str = ""
    registration: str = ""
    ticket: str = ""
    repeated: bool = False  # this scan id had been answered before
    conflict: bool = False

    def as_json(self) -> dict:
        return {
            "scan_id": self.scan_id,
            "colour": self.colour,
            "sentence": self.sentence,
            "detail": self.detail,
            "name": self.name,
            "registration": self.registration,
            "ticket": self.ticket,
            "repeated": self.repeated,
            "conflict": self.conflict,
        }


def door_user_key(user_pk) -> str:
    """The name a door phone files its queue of offline scans under: one per
    staff user (a phone shared by two doormen never sends one's scans as the
    other's), opaque (not the user's id). sha1 named, not left to Django's
    default (sha256 from Django 2028): a key that changed with an upgrade
    would strand the scans a phone queued before it."""
    return salted_hmac("nightjar.door.queue", str(user_pk), algorithm="sha1").hexdigest()[:16]


def clock(at: datetime) -> str:
    return f"{timezone.localtime(at):%H:%M}"


def fill_digests() -> None:
    """Give every ticket without one its digest row (the worker's plain INSERT
    sends no signal). Two doors doing this at once insert each row once."""
    missing = Ticket.objects.filter(door_digest__isnull=True).values_list("pk", "registration_id", "secret")
    rows = [
        TicketDigest(sha256=digest(secret), ticket_id=pk, registration_id=registration_id, number=f"T-{pk:04d}")
        for pk, registration_id, secret in missing.iterator()
    ]
    TicketDigest.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)


def find_digest(code: str) -> TicketDigest | None:
    """The digest row of a scanned secret: one index probe on its SHA-256,
    then the stored secret compared in constant time."""
    wanted = digest(code)
    row = TicketDigest.objects.select_related("ticket").filter(sha256=wanted).first()
    if row is None:
        fill_digests()
        row = TicketDigest.objects.select_related("ticket").filter(sha256=wanted).first()
    if row is None:
        return None
    if row.ticket is not None and not hmac.compare_digest(row.ticket.secret.encode(), code.encode()):
        return None
    return row


def judge(code, *, typed: bool = False) -> Verdict:
    """Which ticket a scanned or typed code names, or why it names none.
    Only a typed code may be a number: a camera that reads "5" off a
    product's barcode must not admit T-0005. Reads only (the digests aside):
    the scan service writes."""
    text = code.strip() if isinstance(code, str) else ""
    if not text:
        return Verdict(Scan.RED, NOT_OURS, "The code was empty.")
    if len(text) > MAX_PAYLOAD:
        return Verdict(
            Scan.RED,
            NOT_OURS,
            f"The code is {len(code)} characters long; a ticket's is {SECRET_LENGTH}. It is not ours.",
        )
    number = TYPED.fullmatch(text)
    if number and typed:
        return judge_typed(number["kind"] or "T", int(number["number"]))
    if number or not URL_SAFE.fullmatch(text):
        return Verdict(Scan.RED, NOT_OURS, "This QR code is not a Nightjar ticket.")
    if len(text) != SECRET_LENGTH:
        return Verdict(
            Scan.RED,
            NOT_OURS,
            f"The code is {len(text)} characters long where a ticket's is {SECRET_LENGTH}: truncated or altered.",
        )
    row = find_digest(text)
    if row is None:
        return Verdict(
            Scan.RED, NOT_OURS, "The code has a ticket's shape but matches none: altered, or from another event."
        )
    if row.ticket is None:
        return replaced(row)
    return judge_ticket(row.ticket)


def judge_typed(kind: str, number: int) -> Verdict:
    if kind in "Rr":
        registration = Registration.objects.filter(pk=number).first()
        if registration is None:
            return Verdict(Scan.RED, NOT_OURS, f"There is no registration R-{number:04d}.")
        ticket = registration.tickets_in_order().first()
        if ticket is None:
            return Verdict(Scan.RED, NOT_OURS, f"{registration.code} has no ticket yet; the guest cannot be admitted.")
        return judge_ticket(ticket)
    ticket = Ticket.objects.filter(pk=number).first()
    if ticket is not None:
        return judge_ticket(ticket)
    removed = TicketDigest.objects.filter(number=f"T-{number:04d}", ticket__isnull=True).first()
    if removed is not None:
        return replaced(removed)
    return Verdict(Scan.RED, NOT_OURS, f"There is no ticket T-{number:04d}.")


def replaced(row: TicketDigest) -> Verdict:
    kept = Ticket.objects.filter(registration_id=row.registration_id).order_by("issued", "id").first()
    if kept is None:
        return Verdict(Scan.RED, NOT_OURS, f"Ticket {row.number} was removed and has no successor.")
    return Verdict(
        Scan.RED,
        f"Replaced by {kept.number}",
        f"Ticket {row.number} was a duplicate that repair removed; {kept.number} is the guest's ticket.",
    )


def judge_ticket(ticket: Ticket) -> Verdict:
    if ticket.registration.seat == Seat.CANCELLED:  # its seat went back: the ticket is void
        return Verdict(
            Scan.RED, "Cancelled", f"{ticket.registration.code} was cancelled; its ticket {ticket.number} is void."
        )
    count = Ticket.objects.filter(registration_id=ticket.registration_id).count()
    if count > 1:
        return Verdict(
            Scan.RED,
            NOT_OURS,
            f"{ticket.registration.code} has {count} tickets; staff must repair it before the door admits anyone on it.",
        )
    return Verdict(Scan.GREEN, f"Welcome, {ticket.name}", ticket=ticket)


def answer_of(scan: Scan, *, repeated: bool = False) -> Answer:
    ticket = scan.ticket
    return Answer(
        scan_id=scan.scan_id,
        colour=scan.colour,
        sentence=scan.sentence,
        detail=scan.detail,
        name=ticket.name if ticket else "",
        registration=ticket.registration.code if ticket else "",
        ticket=ticket.number if ticket else "",
        repeated=repeated,
        conflict=scan.conflict,
    )


def checked_scan_id(scan_id) -> str:
    if not isinstance(scan_id, str) or not SCAN_ID.fullmatch(scan_id):
        raise DoorError("Each scan needs its own id: 1 to 64 letters, digits or . _ : -, e.g. a UUID.")
    return scan_id


def believed(scanned: datetime | None, now: datetime) -> datetime:
    """When an offline scan was made, by the device's clock if it is near ours."""
    if scanned is not None and timezone.is_naive(scanned):
        scanned = timezone.make_aware(scanned, UTC)  # no zone: UTC, what toISOString() sends
    if scanned is None or abs(now - scanned) > CLOCK_SLACK:
        return now
    return min(scanned, now)


SHA256 = re.compile(r"[0-9a-f]{64}")


def judge_digest(sha256) -> Verdict:
    """An offline door's scan, sent as the SHA-256 of the code it read (the
    phone keeps no secret it does not need): the same verdicts as judge()."""
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        return Verdict(Scan.RED, NOT_OURS, "The scan's digest is not a SHA-256.")
    row = TicketDigest.objects.select_related("ticket").filter(sha256=sha256).first()
    if row is None:
        fill_digests()
        row = TicketDigest.objects.select_related("ticket").filter(sha256=sha256).first()
    if row is None:
        return Verdict(Scan.RED, NOT_OURS, "The code matches no ticket: altered, or from another event.")
    if row.ticket is None:
        return replaced(row)
    return judge_ticket(row.ticket)


def scan_ticket(
    *,
    code,
    scan_id: str,
    actor: str,
    door: str,
    scanned: datetime | None = None,
    offline: bool = False,
    admitted: bool = False,
    typed: bool = False,
    code_sha256=None,
) -> Answer:
    """A scan at the door: the first scan of a valid ticket checks the guest
    in (the check-in and its scan in one transaction), every later one is
    amber with the original time and door, anything else red. A scan id seen
    before gets its first answer again and writes nothing. `admitted`: an
    offline door let the guest in before asking (a conflict if another scan
    was first); an offline scan the door did not admit (its list said red or
    amber) is recorded but checks nobody in: what the phone showed stands.
    `typed`: staff typed the code (a ticket or registration number).
    `code_sha256`: an offline scan sent as its code's digest instead of the code."""
    scan_id = checked_scan_id(scan_id)
    # Any text a phone sends is stored as every database stores it (a lone surrogate
    # or a NUL would fail the INSERT: PostgreSQL refuses NUL, both refuse surrogates).
    door = storable_text(door.strip() if isinstance(door, str) else "", max_bytes=160)[:40] or "door"
    actor = storable_text(actor, max_bytes=600)[:150]
    by_digest = code is None and code_sha256 is not None and not typed
    fingerprint = code_fingerprint(code, typed=typed, sha256=code_sha256 if by_digest else None)
    previous = Scan.objects.select_related("ticket__registration").filter(scan_id=scan_id).first()
    if previous is not None:
        return repeat_of(previous, fingerprint=fingerprint, actor=actor)
    verdict = judge_digest(code_sha256) if by_digest else judge(code, typed=typed)
    check_in = verdict.ticket is not None
    if offline and not admitted and verdict.ticket is not None:
        check_in = False  # what the phone showed stands: it let nobody in on this scan
        first = CheckIn.objects.filter(ticket=verdict.ticket).first()
        if first is not None:
            # The phone showed amber (its own earlier scan of the ticket, say), and the ticket
            # is in: amber with the first check-in's time and door, as an online scan's answer.
            verdict = already_in(verdict.ticket, first)
        else:
            # Turned away at the door by its offline list (stale, say): recorded, not checked in.
            verdict = Verdict(
                Scan.RED,
                "Not admitted (offline)",
                f"The door's offline list turned {verdict.ticket.number} away; it is not checked in.",
                ticket=None,
            )
    now = timezone.now()
    at = believed(scanned, now)
    try:
        with transaction.atomic():
            scan = Scan.objects.create(
                scan_id=scan_id,
                by=actor[:150],
                door=door,
                scanned=at,
                received=now,
                colour=verdict.colour,
                sentence=verdict.sentence[:300],
                detail=verdict.detail[:300],
                ticket=verdict.ticket,
                offline=offline,
                code_sha256=fingerprint,
            )
            if check_in:
                check_in_or_amber(scan, verdict.ticket, admitted=admitted)
    except IntegrityError:
        # The same scan id sent twice at once: the other request wrote it.
        previous = Scan.objects.select_related("ticket__registration").filter(scan_id=scan_id).first()
        if previous is None:
            raise
        return repeat_of(previous, fingerprint=fingerprint, actor=actor)
    return answer_of(scan)


def code_fingerprint(code, *, typed: bool, sha256: str | None = None) -> str:
    """What a scan id is bound to: the digest of the code's digest (the same
    whether the phone sent the code online or, queued offline, its digest)
    and whether it was typed."""
    if sha256 is None:
        text = code.strip() if isinstance(code, str) else repr(code)[:200]
        sha256 = digest(text)
    return digest(("typed:" if typed else "scanned:") + str(sha256)[:64])


def repeat_of(previous: Scan, *, fingerprint: str, actor: str) -> Answer:
    """A scan id answered before: the same scan sent again (a retry, a sync
    repeated) gets its first answer, marked repeated; the id with another
    code or from another staff user is refused (a phone reusing ids would
    otherwise be told the first scan's verdict for another ticket)."""
    if previous.by != actor or (previous.code_sha256 and previous.code_sha256 != fingerprint):
        raise DoorError(
            f"Scan id {previous.scan_id} was already used for another scan"
            f"{'' if previous.by == actor else ' by another staff user'}: nothing was checked in. "
            "Scan the ticket again (each scan needs an id of its own)."
        )
    return answer_of(previous, repeated=True)


def check_in_or_amber(scan: Scan, ticket: Ticket, *, admitted: bool) -> None:
    """Insert the ticket's check-in; if another scan's is there (or commits
    first: the unique ticket makes a parallel insert wait, then fail), the
    scan answers amber with that one's time and door."""
    try:
        with transaction.atomic():
            CheckIn.objects.create(
                ticket=ticket,
                registration_id=ticket.registration_id,
                at=scan.scanned,
                door=scan.door,
                by=scan.by,
                scan=scan,
            )
        return
    except IntegrityError:
        first = CheckIn.objects.get(ticket=ticket)
    verdict = already_in(ticket, first)
    scan.colour, scan.sentence, scan.detail = verdict.colour, verdict.sentence, verdict.detail
    scan.conflict = admitted
    scan.save(update_fields=["colour", "sentence", "detail", "conflict"])


def already_in(ticket: Ticket, first: CheckIn) -> Verdict:
    """Amber: the ticket's check-in, with its time and door."""
    return Verdict(
        Scan.AMBER,
        f"Already checked in at {clock(first.at)} ({first.door})",
        f"{ticket.name} · {ticket.registration.code} · {ticket.number}",
        ticket=ticket,
    )


def undo_check_in(*, ticket: str, actor: str, reason: str) -> CheckIn:
    """Staff take back a check-in made by mistake: the row goes, the reason
    goes on the registration's history, in one transaction. The ticket is
    valid again at the door."""
    reason = (reason or "").strip()
    if not reason:
        raise DoorError("Say why the check-in is undone: the reason goes on the registration's history.")
    typed = TYPED.fullmatch((ticket or "").strip())
    if not typed or (typed["kind"] or "T") not in "Tt":
        raise DoorError(f"{ticket!r} is not a ticket number (T-0001).")
    number = f"T-{int(typed['number']):04d}"
    with transaction.atomic():
        check_in = (
            CheckIn.objects.select_for_update()
            .select_related("ticket__registration")
            .filter(ticket_id=int(typed["number"]))
            .first()
        )
        if check_in is None:
            raise DoorError(f"{number} is not checked in; there is nothing to undo.")
        check_in.delete()
        record_staff_action(
            actor=actor,
            action="undo check-in",
            registration=check_in.ticket.registration,
            detail=f"{number} was checked in at {clock(check_in.at)} ({check_in.door}) by {check_in.by}: {reason}",
        )
    return check_in


def check_in_of(registration: Registration) -> CheckIn | None:
    """The guest's ticket page says when they came in."""
    return CheckIn.objects.filter(registration=registration).order_by("at").first()


def valid_digests() -> dict:
    """What a door phone keeps for offline scans: the digests of the tickets
    it may admit (never the secrets), those already in, and those replaced."""
    fill_digests()
    # Registrations the door refuses: two tickets (until repair), or cancelled.
    refused = set(
        Ticket.objects.values("registration_id")
        .order_by()
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .values_list("registration_id", flat=True)
    )
    # Cancelled registrations' tickets are void: an offline door judges them red, as the server does.
    refused |= set(Registration.objects.filter(seat=Seat.CANCELLED).values_list("pk", flat=True))
    checked_in = set(CheckIn.objects.values_list("ticket_id", flat=True))
    valid, inside = [], []
    for sha256, ticket_id, registration_id in TicketDigest.objects.filter(ticket__isnull=False).values_list(
        "sha256", "ticket_id", "registration_id"
    ):
        if registration_id in refused:
            continue
        (inside if ticket_id in checked_in else valid).append(sha256)
    numbers = offline_numbers(refused, checked_in)
    return {"valid": valid, "checked_in": inside, "numbers": numbers}


def offline_numbers(refused: set, checked_in: set) -> dict[str, str]:
    """What a typed number names, for a door offline: {"T-0004": "valid" |
    "checked_in", "R-0004": ...} — only tickets it may admit or has seen in,
    as the server judges a typed number (a registration by its first ticket;
    none for a registration the server refuses: duplicate tickets, or
    cancelled). Numbers are no secret."""
    numbers, first = {}, {}
    for pk, registration_id in Ticket.objects.order_by("issued", "id").values_list("pk", "registration_id"):
        first.setdefault(registration_id, pk)
        if registration_id in refused:
            continue
        numbers[f"T-{pk:04d}"] = "checked_in" if pk in checked_in else "valid"
    for registration_id, pk in first.items():
        if registration_id not in refused:
            numbers[f"R-{registration_id:04d}"] = "checked_in" if pk in checked_in else "valid"
    return numbers


@dataclass
class Arrivals:
    checked_in: int
    expected: int
    per_minute: list[tuple[datetime, int]] = field(default_factory=list)
    not_arrived: list[Ticket] = field(default_factory=list)
    conflicts: list[Scan] = field(default_factory=list)


def arrivals(*, not_arrived_limit: int = 100) -> Arrivals:
    """The desk's view of the door: checked in N of M, arrivals per minute,
    who has not arrived yet, and offline conflicts."""
    per_minute: dict[datetime, int] = {}
    for at in CheckIn.objects.order_by("at").values_list("at", flat=True):
        minute = at.replace(second=0, microsecond=0)
        per_minute[minute] = per_minute.get(minute, 0) + 1
    waiting = Ticket.objects.filter(check_in__isnull=True).select_related("registration").order_by("id")
    return Arrivals(
        checked_in=CheckIn.objects.count(),
        expected=Ticket.objects.count(),
        per_minute=sorted(per_minute.items()),
        not_arrived=list(waiting[:not_arrived_limit]),
        conflicts=list(Scan.objects.filter(conflict=True).select_related("ticket__registration")[:100]),
    )
