"""The learner's exercise: `lab start` writes a step's handler file for the
learner, and `lab check` grades it (verify_handler's scenarios, then the real
data, read only).

`lab start` copies tickets/lab_files/start_handler.py to lab/handler.py
(NIGHTJAR_LAB_DIR); in lab mode the worker and verify_handler then use that
file unless NIGHTJAR_HANDLER or --handler says otherwise (tickets/handlers.py
loads it).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from classroom import verify
from tickets.handlers import HandlerError, handler_file, require_lab_mode

START_FILE = Path(settings.BASE_DIR) / "tickets" / "lab_files" / "start_handler.py"
# Each step's handler as a complete file (docs/lab.md shows the same text):
# step 1 runs the starting, ack-first handler; step 2 the ack after the commit;
# step 3 the completion key. `lab start --step N` writes step N's file.
STEP_FILES = {
    1: START_FILE,
    2: START_FILE.parent / "step2_handler.py",
    3: START_FILE.parent / "step3_handler.py",
}
# What `lab start --step N` does not set up: the registrations the earlier
# steps made. The guide's IDs assume them (R-0001 is Mina Patel, always there).
STEP_DATA = {
    1: "the step registers Normal guest (R-0002 after `lab reset`).",
    2: "your registrations are not changed; the guide's IDs assume step 1's Normal guest (R-0002) exists, "
    "so Retry guest is R-0003.",
    3: "your registrations are not changed; the guide's IDs assume Normal guest (R-0002) and Retry guest "
    "(R-0003) exist, so the two Same name guests are R-0004 and R-0005.",
}
# The guests the lesson registers, in its order (docs/lab.md). `lab check`
# grades outcomes, not names: every registration the learner made has exactly
# one downloadable ticket, whatever the guests (detours included) are called.
LESSON_GUESTS = ["Normal guest", "Retry guest", "Same name", "Same name"]


def start(*, force: bool = False, step: int = 1) -> Path:
    """Write step `step`'s handler (1: the starting one) for the learner;
    never over their work unless forced. The data is left as it is."""
    require_lab_mode()
    if step not in STEP_FILES:
        raise HandlerError(f"There is no step {step}; the lab's steps are {', '.join(map(str, STEP_FILES))}.")
    target = handler_file()
    if target.exists() and not force:
        raise HandlerError(f"{target} already exists; your changes are kept. Use --force to start over.")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(STEP_FILES[step].read_text())
    return target


@dataclass
class Check:
    name: str
    passed: bool
    sentence: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.sentence}"


# What to look at when a verify_handler scenario fails, by what its reason says.
ACK_HINT = "look at where handle() calls ack(): it must come after the transaction commits."
KEY_HINT = (
    "look at the completion key: insert it (Completion.objects.insert_if_new) in the same transaction as the "
    "ticket, and make the ticket only when the key is new."
)


def hint(reason: str) -> str:
    if "acked before" in reason:
        return ACK_HINT
    if "tickets" in reason or "completion key" in reason:
        return KEY_HINT
    return "see docs/lab.md"


def grade(handler: str, decided: Callable[[Check], None] = lambda check: None) -> list[Check]:
    """The teacher's checks: the handler through verify_handler's scenarios on
    a disposable database and queue, then the real data (read only).
    `decided` gets each check the moment it is decided (a scenario takes
    seconds), so `lab check` prints as it goes rather than all at the end."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        decided(check)

    collect = _Collect(add)
    status = verify.run_isolated(handler, stdout=collect)
    if not checks:
        tail = " / ".join(collect.lines[-3:]) or f"exit status {status}"
        add(Check("handler", False, f"verify_handler could not run it ({tail})."))
    for check in data_checks():
        add(check)
    return checks


class _Collect:
    """verify_handler's output, line by line: each PASS/FAIL line a check."""

    def __init__(self, add: Callable[[Check], None]) -> None:
        self.add = add
        self.lines: list[str] = []

    def write(self, line: str) -> None:
        self.lines.append(line)
        verdict, _, rest = line.partition("  ")
        if verdict not in ("PASS", "FAIL"):
            return
        scenario, _, reason = rest.partition(": ")
        sentence = reason if verdict == "PASS" else f"{reason}; {hint(reason)}"
        self.add(Check(f"handler, {scenario}", verdict == "PASS", sentence))


def data_checks() -> list[Check]:
    """The real data, read only: what a teacher would look at after the exercise."""
    from django.db.models import Count

    from tickets import pdf
    from tickets.models import Completion, Registration, Ticket
    from tickets.services import audit, demo, registrations

    has_ticket, has_key = registrations.has_ticket(), registrations.has_key()

    def codes(rows) -> list[str]:
        return [r.code for r in rows.order_by("pk")[:10]]

    def check(name: str, found: list[str], passed: str, failed: str) -> Check:
        if not found:
            return Check(name, True, passed)
        return Check(name, False, failed.format(codes=", ".join(found), first=found[0]))

    checks = [
        check(
            "no lost registrations",
            codes(registrations.pending_registrations().filter(~has_ticket)),
            "every registration has a ticket",
            "no ticket for {codes}: its delivery was lost. Run `python manage.py retry {first}`, then the worker.",
        ),
        check(
            "no duplicate tickets",
            codes(Registration.objects.annotate(n=Count("tickets")).filter(n__gt=1)),
            "no registration has two tickets",
            "more than one ticket for {codes}: `python manage.py repair {first}` shows the plan, `--apply` does it.",
        ),
        check(
            "every ticket has its completion key",
            codes(Registration.objects.filter(has_ticket, ~has_key)),
            "keys and tickets in pairs",
            "a ticket but no completion key for {codes} (an earlier version of your handler made them): a "
            "redelivery would make a second ticket. `python manage.py repair {first} --apply` adds the key.",
        ),
    ]
    mina = Registration.objects.filter(pk=1, name=demo.DEMO_NAME).first()
    intact = mina is not None and mina.tickets.count() == 1 and Completion.objects.filter(registration=mina).exists()
    checks.append(
        Check("Mina Patel's ticket intact", True, "R-0001 has her one ticket")
        if intact
        else Check(
            "Mina Patel's ticket intact",
            False,
            "R-0001 (Mina Patel) must keep exactly one ticket and its key; `python manage.py lab reset` puts her back.",
        )
    )
    yours = list(Registration.objects.exclude(pk=1).order_by("pk"))
    if not yours:
        names = ", ".join(dict.fromkeys(LESSON_GUESTS))
        checks.append(
            Check("your registrations", False, f"none besides Mina Patel yet: register {names} as docs/lab.md says.")
        )
    else:
        wrong = [r.code for r in yours if r.tickets.count() != 1]
        if wrong:
            shown_codes = ", ".join(wrong[:10])
            checks.append(Check("your registrations", False, f"{shown_codes} must have exactly one ticket each."))
        else:
            for ticket in Ticket.objects.filter(registration__in=yours):
                pdf.render(ticket)  # downloadable: the PDF renders
            listed = f"{yours[0].code} to {yours[-1].code}" if len(yours) > 1 else yours[0].code
            checks.append(Check("your registrations", True, f"{listed}: one downloadable ticket each"))
    report = audit.audit_invariants(pending_older_than=10**9)
    checks.append(
        Check("audit", report.passed, "every invariant holds" if report.passed else "; ".join(report.violations))
    )
    return checks
