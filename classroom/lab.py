"""The learner's exercise: `lab start` writes a step's handler file for the
learner, and `lab check` grades it (verify_handler's scenarios, then the real
data, read only).

`lab start` copies tickets/lab_files/start_handler.py to lab/handler.py
(NIGHTJAR_LAB_DIR); in lab mode the worker and verify_handler then use that
file unless NIGHTJAR_HANDLER or --handler says otherwise (tickets/handlers.py
loads it).
"""

from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from classroom import verify
from classroom.verdicts import Verdict
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
# The guide names each part's next guest; `lab start --step N` leaves the data
# alone, so it says what is there rather than what the guide assumes.


def data_now() -> str:
    """The registrations there are and the ID the next guest will get."""
    from tickets.contract import format_code
    from tickets.models import Registration

    last = Registration.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    there = {0: "no registrations", 1: "Mina Patel (R-0001) only"}.get(last, f"R-0001 to {format_code(last)}")
    return f"not changed: {there}; the next guest you register gets {format_code(last + 1)}."


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


def graded(scenario: Verdict) -> Verdict:
    """A verify_handler scenario as one of `lab check`'s checks: a failure says what to look at."""
    reason = scenario.reason if scenario.passed else f"{scenario.reason}; {hint(scenario.reason)}"
    return Verdict(f"handler, {scenario.name}", scenario.passed, reason)


def grade(handler: str, decided: Callable[[Verdict], None] = lambda check: None) -> list[Verdict]:
    """The teacher's checks: the handler through verify_handler's scenarios on
    a disposable database and queue, then the real data (read only).
    `decided` gets each check the moment it is decided (a scenario takes
    seconds), so `lab check` prints as it goes rather than all at the end."""
    checks: list[Verdict] = []

    def add(check: Verdict) -> None:
        checks.append(check)
        decided(check)

    printed: list[str] = []
    status = verify.run_isolated(handler, say=printed.append, decided=lambda scenario: add(graded(scenario)))
    if not checks:
        tail = " / ".join(printed[-3:]) or f"exit status {status}"
        add(Verdict("handler", False, f"verify_handler could not run it ({tail})."))
    for check in data_checks():
        add(check)
    return checks


def data_checks() -> list[Verdict]:
    """The real data, read only: what a teacher would look at after the exercise."""
    from django.db.models import Count

    from tickets import pdf
    from tickets.models import Completion, Registration, Ticket
    from tickets.services import audit, demo, registrations

    has_ticket, has_key = registrations.has_ticket(), registrations.has_key()

    def codes(rows) -> list[str]:
        return [r.code for r in rows.order_by("pk")[:10]]

    def check(name: str, found: list[str], passed: str, failed: str) -> Verdict:
        if not found:
            return Verdict(name, True, passed)
        return Verdict(name, False, failed.format(codes=", ".join(found), first=found[0]))

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
            "redelivery would make a second ticket. Make your handler safe first (step 3), then "
            "`python manage.py repair {first} --apply` adds the key.",
        ),
    ]
    mina = Registration.objects.filter(pk=1, name=demo.DEMO_NAME).first()
    intact = mina is not None and mina.tickets.count() == 1 and Completion.objects.filter(registration=mina).exists()
    checks.append(
        Verdict("Mina Patel's ticket intact", True, "R-0001 has her one ticket")
        if intact
        else Verdict(
            "Mina Patel's ticket intact",
            False,
            "R-0001 (Mina Patel) must keep exactly one ticket and its key; `python manage.py lab reset` puts her back.",
        )
    )
    yours = list(Registration.objects.exclude(pk=1).order_by("pk"))
    if not yours:
        names = ", ".join(dict.fromkeys(LESSON_GUESTS))
        checks.append(
            Verdict("your registrations", False, f"none besides Mina Patel yet: register {names} as docs/lab.md says.")
        )
    else:
        wrong = [r.code for r in yours if r.tickets.count() != 1]
        if wrong:
            shown_codes = ", ".join(wrong[:10])
            checks.append(Verdict("your registrations", False, f"{shown_codes} must have exactly one ticket each."))
        else:
            for ticket in Ticket.objects.filter(registration__in=yours):
                pdf.render(ticket)  # downloadable: the PDF renders
            listed = f"{yours[0].code} to {yours[-1].code}" if len(yours) > 1 else yours[0].code
            checks.append(Verdict("your registrations", True, f"{listed}: one downloadable ticket each"))
    report = audit.audit_invariants(pending_older_than=10**9)
    checks.append(
        Verdict("audit", report.passed, "every invariant holds" if report.passed else "; ".join(report.violations))
    )
    return checks
