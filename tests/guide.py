"""Run a lab guide (docs/lab.md, or a translation with the same blocks) as a
learner would, and compare what it shows with what really happens.

`run_guide(path, part, workdir)` copies the checkout (tests/checkout.py),
walks the guide from top to bottom and does every step of `part`:

- the first terminal: a console command `bin/run --no-worker` (with
  `NIGHTJAR_BROKER=redis ` before it on Redis) starts the stack the way bin/run
  does (`LocalRun`: bin/run itself, on free ports); `<!-- guide: stop the site -->`
  is Ctrl+C in that terminal (SIGINT to bin/run);
- the second terminal: every other `$ ` command of every ```console block is
  typed, in order, into ONE interactive bash on a pty (a real terminal: job
  control, `^C` echoed, `echo $?`), started with a fresh terminal's
  environment (PATH, HOME, LANG: nothing exported) in the copy, so
  `source .venv/bin/activate` works as written. The lines after a command, up
  to the next `$ `, are its expected output. Each part starts a new shell;
- an expected line starting with `^C`: when the lines before it have been
  printed, the runner presses Ctrl+C (the pty's interrupt character, so the
  foreground job gets SIGINT as from a keyboard);
- `<!-- guide: kill -9 -->` before a block: its expected line `Killed` is where
  the runner SIGKILLs the terminal's foreground job (what `kill -9 <pid>` from
  another terminal does; bash then prints `Killed`);
- `<!-- guide: wait N -->`: the learner waits N seconds before the next block
  (an idle time the guide relies on, never an assertion); `wait N after kill`:
  until N seconds have passed since the last `kill -9`;
- `<!-- guide: paste lab/handler.py -->`: the next ```python block is written to
  lab/handler.py (the learner pasting the step's whole file);
- `<!-- guide: after part rabbitmq -->` (in the Redis part, which the runner
  walks in a copy of its own): the learner arrives with the RabbitMQ part's
  data, as one who followed the guide in order does: every guest that part
  registers, with one ticket and its key, and a stopped worker's report;
- `<!-- browser: register "NAME" R-000N -->`, `<!-- browser: ticket R-000N -->`,
  `<!-- browser: no ticket R-000N -->`: done in Chromium via Playwright on the
  running site: register NAME and see R-000N with "Your ticket is being
  prepared"; open R-000N from *Your registrations*, open its ticket and
  download the PDF (it must name R-000N); or see it still has no ticket;
- `<!-- guide: part rabbitmq -->` / `<!-- guide: part redis -->`: everything
  after it (to the next part marker) belongs to that part.

Outputs are compared after `normalise`, which replaces only what differs from
run to run: times (and `last seen N s ago`), Redis stream entry IDs,
RabbitMQ node names (`nightjar-N@host`), the host name (`vm` in the guide),
process ids after `host:` and in `(pid N)`, and the broker/site ports (the
guide's 5673/6380/8000 are the runner's free ports; commands get them
substituted too). Everything else must match character for character.
A mismatch raises `GuideMismatch` with the guide's file:line, the expected
block and a diff against the actual output, for every block that differed.

`GUIDE_UPDATE=1` writes the actual outputs into the guide instead (host as
`vm`, the guide's ports), for re-capturing it after a deliberate change.
"""

from __future__ import annotations

import difflib
import io
import os
import re
import signal
import socket
import subprocess
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.checkout import LocalRun, clean_env, copy_checkout
from tests.conftest import ROOT

GUIDE_HOST = "vm"
GUIDE_PORTS = {"rabbitmq": 5673, "redis": 6380, "site": 8000}
PROMPT = "__GUIDE_PROMPT__ "
COMMAND_TIMEOUT = 300
SHOWN_FAILURES = 5  # in full; the rest by file:line
# A person reads the pause line before pressing a key: a paused worker reports
# itself (status's Workers block) within its first 0.2 s of waiting.
HUMAN_DELAY = 1.0
MARKER = re.compile(r"<!--\s*(guide|browser):\s*(.*?)\s*-->")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BIN_RUN = re.compile(r"^(NIGHTJAR_BROKER=(\w+) )?bin/run --no-worker$")


class GuideMismatch(AssertionError):
    pass


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` in the guide
    text: str
    expected: list[str] = field(default_factory=list)
    actual: list[str] | None = None


@dataclass
class Step:
    line: int
    kind: str  # console, python, guide, browser
    part: str | None
    text: str = ""
    commands: list[Command] = field(default_factory=list)
    end: int = 0  # line of the closing fence


def parse(text: str) -> list[Step]:
    steps: list[Step] = []
    part = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.search(line)
        if marker and not line.startswith("```"):
            kind, body = marker.groups()
            if kind == "guide" and body.startswith("part "):
                part = body.split()[1]
            else:
                steps.append(Step(i + 1, kind, part, body))
            i += 1
            continue
        if line in ("```console", "```python"):
            start = i
            i += 1
            body = []
            while lines[i] != "```":
                body.append(lines[i])
                i += 1
            if line == "```python":
                steps.append(Step(start + 1, "python", part, "\n".join(body) + "\n", end=i + 1))
            else:
                step = Step(start + 1, "console", part, end=i + 1)
                for n, item in enumerate(body):
                    if item.startswith("$ "):
                        step.commands.append(Command(start + 2 + n, item[2:]))
                    elif step.commands:
                        step.commands[-1].expected.append(item)
                steps.append(step)
        i += 1
    return steps


def normalise(text: str, host: str, ports: dict[str, int]) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?", "<time>", text)
    text = re.sub(r"\b\d{13}-\d+\b", "<stream-id>", text)
    text = re.sub(r"\blast seen \d+ s ago\b", "last seen <n> s ago", text)
    text = re.sub(r"\bnightjar-\d+@[\w.-]+", "<node>", text)  # a RabbitMQ node's name
    text = re.sub(rf"\b{re.escape(host)}\b", "<host>", text)
    text = re.sub(r"<host>:\d+", "<host>:<pid>", text)
    text = re.sub(r"\(pid \d+\)", "(pid <pid>)", text)
    for name, port in ports.items():
        text = re.sub(rf"\b{port}\b", f"<{name}-port>", text)
    return text


class Terminal:
    """One interactive bash on a pty: the learner's second terminal."""

    def __init__(self, cwd: Path) -> None:
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.fd = master
        self.process = subprocess.Popen(
            ["setsid", "--ctty", "bash", "--norc", "--noprofile", "--noediting", "-i"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=clean_env(),
            close_fds=True,
        )
        os.close(slave)
        self.buffer = ""
        self.last_kill = 0.0
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        # PROMPT_COMMAND puts the marker back after `source .venv/bin/activate` prefixes it.
        self._type(f"PROMPT_COMMAND=\"PS1='{PROMPT}'\"; PS2=''; unset HISTFILE\n")
        self._wait(lambda: self.buffer.endswith(PROMPT), 30)

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.buffer += "\0"  # closed
                    self.changed.notify_all()
                    return
                # What a terminal shows: colours are not text.
                self.buffer += ANSI.sub("", data.decode("utf-8", "replace").replace("\r\n", "\n"))
                self.changed.notify_all()

    def _type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def _wait(self, done, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: done() or self.buffer.endswith("\0"), timeout) and done()

    def run(self, command: str, expected: list[str], kill: bool) -> list[str]:
        with self.changed:
            self.buffer = ""
        self._type(command + "\n")
        echo = command + "\n"
        self._wait(lambda: self.buffer.startswith(echo), 10)

        def printed() -> list[str]:
            return self.buffer[len(echo) :].split("\n")[:-1]

        for index, line in enumerate(expected):
            if line.startswith("^C") or (kill and line == "Killed"):
                self._wait(lambda index=index: len(printed()) >= index, COMMAND_TIMEOUT)
                time.sleep(HUMAN_DELAY)  # as a person would: the pause line is up, then the key
                if line.startswith("^C"):
                    self._type(chr(termios.tcgetattr(self.fd)[6][termios.VINTR][0]))
                else:
                    os.killpg(os.tcgetpgrp(self.fd), signal.SIGKILL)
                    self.last_kill = time.monotonic()
                break
        if not self._wait(lambda: self.buffer.endswith(PROMPT), COMMAND_TIMEOUT):
            self._type("\x03")  # stuck: interrupt it and report what it printed
            self._wait(lambda: self.buffer.endswith(PROMPT), 30)
        out = self.buffer[len(echo) :] if self.buffer.startswith(echo) else self.buffer
        if out.endswith(PROMPT):
            out = out[: -len(PROMPT)]
        return out.split("\n")[:-1] if out.endswith("\n") else out.split("\n") if out else []

    def close(self) -> None:
        if self.process.poll() is None:
            self._type("exit\n")
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self.fd)


class Browser:
    """Chromium via Playwright, one page kept for the part (its cookies too)."""

    def __init__(self, site: str) -> None:
        from playwright.sync_api import sync_playwright

        from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

        self.site = site
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        self.page = self._browser.new_page(accept_downloads=True)

    def do(self, action: str) -> None:
        from playwright.sync_api import expect
        from pypdf import PdfReader

        page = self.page
        registered = re.fullmatch(r'register "([^"]+)" (R-\d+)', action)
        if registered:
            name, code = registered.groups()
            page.goto(self.site + "/")
            page.get_by_role("main").get_by_role("link", name="Plan your visit").click()
            page.get_by_role("main").get_by_role("link", name="The evening").click()
            page.get_by_label("Guest name").fill(name)
            page.get_by_role("button", name="Register for the evening").click()
            expect(page.get_by_role("heading", name=f"Registration {code}")).to_be_visible()
            expect(page.get_by_text("Your ticket is being prepared")).to_be_visible()
            return
        shown = re.fullmatch(r"(no )?ticket (R-\d+)", action)
        if not shown:
            raise ValueError(f"unknown browser step {action!r}")
        page.goto(self.site + "/registrations/")
        page.get_by_role("link", name=shown.group(2), exact=True).click()
        expect(page.get_by_role("heading", name=f"Registration {shown.group(2)}")).to_be_visible()
        if shown.group(1):
            expect(page.get_by_text("Your ticket is being prepared")).to_be_visible()
            expect(page.get_by_role("link", name="Open ticket")).to_have_count(0)
            return
        page.get_by_role("link", name="Open ticket").click()
        with page.expect_download() as download:
            page.get_by_role("link", name="Download ticket").click()
        pdf = PdfReader(io.BytesIO(Path(download.value.path()).read_bytes()))
        text = "".join(p.extract_text() for p in pdf.pages)
        assert shown.group(2) in text, f"the PDF does not name {shown.group(2)}: {text[:200]!r}"

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()


def _substitute_ports(command: str, ports: dict[str, int]) -> str:
    for name, port in ports.items():
        command = re.sub(rf"\b{GUIDE_PORTS[name]}\b", str(port), command)
    return command


GUIDE_MARKERS = re.compile(
    r"stop the site|wait \d+(\.\d+)?( after kill)?|kill -9|paste lab/handler\.py|after part rabbitmq"
)
BROWSER_MARKERS = re.compile(r'register "[^"]+" R-\d+|(no )?ticket R-\d+')


def check_markup(path: Path) -> list[str]:
    """What the runner could not follow in `path`, without running anything:
    unknown markers, console blocks outside a part, a paste with no python
    block after it, more than one ^C for one command."""
    problems = []
    steps = parse(path.read_text())
    for index, step in enumerate(steps):
        where = f"{path}:{step.line}"
        if step.kind == "guide" and not GUIDE_MARKERS.fullmatch(step.text):
            problems.append(f"{where}: unknown guide marker {step.text!r}")
        if step.kind == "browser" and not BROWSER_MARKERS.fullmatch(step.text):
            problems.append(f"{where}: unknown browser step {step.text!r}")
        if step.kind == "console" and step.part is None:
            problems.append(f"{where}: a console block before any <!-- guide: part ... -->")
        if step.text == "paste lab/handler.py" and not any(s.kind == "python" for s in steps[index + 1 :]):
            problems.append(f"{where}: nothing to paste (no python block after it)")
        for command in step.commands:
            if sum(line.startswith("^C") for line in command.expected) > 1:
                problems.append(f"{path}:{command.line}: more than one ^C for one command")
    return problems


def run_guide(path: Path, part: str, workdir: Path, update: bool | None = None) -> dict[str, float]:
    """Walk `path`'s `part` (rabbitmq or redis) in a fresh copy of the checkout
    under workdir; raise GuideMismatch listing every block that differs.
    Returns timings (seconds): the whole part, and each `lab check`."""
    update = os.environ.get("GUIDE_UPDATE") == "1" if update is None else update
    started = time.monotonic()
    text = path.read_text()
    name = path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path  # as failures say
    steps = [step for step in parse(text) if step.part == part]
    if not steps:
        raise ValueError(f"{path} has no part {part!r}")
    problems = check_markup(path)
    if problems:
        raise ValueError("\n".join(problems))
    checkout = copy_checkout(workdir / "checkout")
    host = socket.gethostname()
    site: LocalRun | None = None
    terminal: Terminal | None = None
    browser: Browser | None = None
    ports: dict[str, int] = {}
    failures: list[str] = []
    timings: dict[str, float] = {}
    pending: set[str] = set()
    wait = 0.0
    commands: list[Command] = []
    try:
        for step in steps:
            where = f"{name}:{step.line}"
            if step.kind == "guide":
                if step.text == "stop the site":
                    if site:
                        site.stop()
                    site = None
                elif step.text.startswith("wait "):
                    wait = float(step.text.split()[1])
                    if step.text.endswith(" after kill"):
                        assert terminal and terminal.last_kill, f"{where}: no kill -9 before it"
                        wait = terminal.last_kill + wait - time.monotonic()
                elif step.text in ("kill -9", "paste lab/handler.py"):
                    pending.add(step.text)
                elif step.text == "after part rabbitmq":
                    assert site, f"{where}: no bin/run before it"
                    _bring_data(checkout, [s.text for s in parse(text) if s.part == "rabbitmq" and s.kind == "browser"])
                else:
                    raise ValueError(f"{where}: unknown guide marker {step.text!r}")
            elif step.kind == "browser":
                if browser is None:
                    assert site, f"{where}: a browser step before bin/run"
                    browser = Browser(f"http://127.0.0.1:{site.port}")
                try:
                    browser.do(step.text)
                except AssertionError as error:  # playwright's expect raises AssertionError
                    failures.append(f"{where}: browser step {step.text!r} failed:\n{error}")
            elif step.kind == "python":
                if "paste lab/handler.py" in pending:
                    pending.discard("paste lab/handler.py")
                    (checkout / "lab").mkdir(exist_ok=True)
                    (checkout / "lab" / "handler.py").write_text(step.text)
            elif step.kind == "console":
                if wait > 0:
                    time.sleep(wait)
                    wait = 0.0
                kill = "kill -9" in pending
                pending.discard("kill -9")
                for command in step.commands:
                    first = BIN_RUN.match(command.text)
                    if first:
                        broker = first.group(2) or "rabbitmq"
                        site = LocalRun(checkout, broker)
                        site.start()
                        ports = {broker: site.broker_port, "site": site.port}
                        command.actual = []
                    else:
                        if terminal is None:
                            terminal = Terminal(checkout)
                        t0 = time.monotonic()
                        command.actual = terminal.run(_substitute_ports(command.text, ports), command.expected, kill)
                        if command.text.endswith("lab check"):
                            timings[f"lab check, line {command.line}"] = time.monotonic() - t0
                    commands.append(command)
                    expected = normalise("\n".join(command.expected), GUIDE_HOST, GUIDE_PORTS)
                    actual = normalise("\n".join(command.actual), host, ports)
                    if expected != actual:
                        diff = "\n".join(
                            difflib.unified_diff(
                                expected.split("\n"), actual.split("\n"), "guide", "actual", lineterm=""
                            )
                        )
                        failures.append(
                            f"{name}:{command.line}: `$ {command.text}` printed something else.\n"
                            f"Expected (the guide):\n" + "\n".join(command.expected) + f"\nDiff:\n{diff}"
                        )
    finally:
        if terminal:
            terminal.close()
        if browser:
            browser.close()
        if site:
            site.stop()
    timings["part"] = time.monotonic() - started
    if update:
        _write_back(path, text, commands, host, ports)
    elif failures:
        shown, rest = failures[:SHOWN_FAILURES], failures[SHOWN_FAILURES:]
        also = "".join(f"\n  {failure.split(chr(10))[0]}" for failure in rest)
        raise GuideMismatch(
            f"{len(failures)} step(s) of {name} ({part}) differ from a real run "
            f"(re-capture with GUIDE_UPDATE=1 once the change is meant):\n\n"
            + "\n\n".join(shown)
            + (f"\n\nAnd {len(rest)} more:{also}" if rest else "")
        )
    return timings


# What a learner brings from the RabbitMQ part: its guests, each with one
# ticket and its key (the part ends with every check passed), and its workers.
BRING = """
from django.utils import timezone
from tickets.models import Completion, Registration, Ticket, WorkerReport
for name in NAMES:
    registration = Registration.objects.create(name=name)
    Completion.objects.create(registration=registration)
    Ticket.objects.create(registration=registration, name=name)
now = timezone.now()
WorkerReport.objects.create(name="rabbitmq-part:1", host="rabbitmq-part", pid=1, transport="amqp",
                            mode="drain", started=now, last_seen=now, stopped=now)
"""


def _bring_data(checkout: Path, browser_steps: list[str]) -> None:
    names = [m.group(1) for m in map(re.compile(r'register "([^"]+)"').match, browser_steps) if m]
    subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "manage.py", "shell", "-c", f"NAMES = {names!r}\n" + BRING],
        cwd=checkout,
        env=clean_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )


def _write_back(path: Path, text: str, commands: list[Command], host: str, ports: dict[str, int]) -> None:
    lines = text.split("\n")
    for command in sorted(commands, key=lambda c: c.line, reverse=True):
        if command.actual is None:
            continue
        actual = "\n".join(command.actual)
        actual = re.sub(rf"\b{re.escape(host)}\b", GUIDE_HOST, actual)
        for name, port in ports.items():
            actual = re.sub(rf"\b{port}\b", str(GUIDE_PORTS[name]), actual)
        new = actual.split("\n") if actual else []
        if len(new) == len(command.expected):  # keep the guide's lines that differ only by a time, a pid...
            new = [
                old if normalise(old, GUIDE_HOST, GUIDE_PORTS) == normalise(line, GUIDE_HOST, GUIDE_PORTS) else line
                for old, line in zip(command.expected, new, strict=True)
            ]
        start = command.line  # index of the line after the `$ ` (0-based == 1-based line)
        lines[start : start + len(command.expected)] = new
    path.write_text("\n".join(lines))
