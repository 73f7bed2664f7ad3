"""The worker is composed of parts that own their state
(nightjar_delivery/worker/__init__.py): no part writes another's attributes,
and the Worker that composes them writes none of theirs. Read from the source
with ast (every path, none skipped), and watched at run time: every attribute
write on a part during real drains on the in-memory transport (per delivery
and in batches, with a rejection, a failure handed back and a redelivery)
comes from a method of that same part."""

import ast
import io
import sys
from pathlib import Path

import pytest

from nightjar_delivery import channel, transport
from nightjar_delivery.worker import Worker, loop, receive, report, screen, settle
from tickets.handler import handle
from tickets.services.registrations import register_guest

pytestmark = pytest.mark.fast

WORKER = Path(loop.__file__).parent
PARTS = [receive.Receiver, screen.Screen, settle.Settler, report.Report, report.Connections, loop.Worker]
# Written on an object no part owns: the command's checkpoint object, told how to keep the connection alive.
NOT_A_PART = {"self.pause"}


def foreign_writes(source: str, path: str = "") -> list[str]:
    """`x.attr = ...` (also augmented, annotated, deleted, setattr()) in a
    class's methods where x is not the method's own `self`."""
    found = []

    def written(target: ast.AST):
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                yield from written(element)
        elif isinstance(target, ast.Attribute):
            yield target

    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in {"setattr", "delattr", "__setattr__"} and node.args:
                owner = ast.unparse(node.args[0])
                if owner != "self":
                    found.append(f"{path}:{node.lineno} {name}({owner}, ...)")
            continue
        for target in (t for each in targets for t in written(each)):
            owner = ast.unparse(target.value)
            if owner != "self" and owner not in NOT_A_PART:
                found.append(f"{path}:{node.lineno} {owner}.{target.attr} =")
    return found


def test_no_part_writes_another_parts_state_in_its_source():
    # Objects, not mixins sharing one self: each part is its own object, the worker holds them.
    assert all(part.__bases__ == (object,) for part in PARTS)
    worker = Worker(handler=handle, stdout=io.StringIO())
    assert [type(getattr(worker, name)) for name in ("receiver", "screen", "settler", "report", "connections")] == [
        receive.Receiver,
        screen.Screen,
        settle.Settler,
        report.Report,
        report.Connections,
    ]
    modules = sorted(WORKER.glob("*.py"))
    assert {m.name for m in modules} >= {"receive.py", "screen.py", "settle.py", "report.py", "loop.py"}
    assert [f for m in modules for f in foreign_writes(m.read_text(), m.name)] == []
    # Not vacuous: what a foreign write looks like is found.
    assert foreign_writes("class W:\n    def f(self):\n        self.settler.flush_acks = True\n")
    assert foreign_writes("class W:\n    def f(self):\n        self.report.handled += 1\n")
    assert foreign_writes("class W:\n    def f(self):\n        setattr(self.screen, 'ahead', {})\n")
    assert foreign_writes("class W:\n    def f(self, other):\n        other.a, self.b = 1, 2\n")
    assert not foreign_writes("class W:\n    def f(self):\n        self.a, self.b = 1, 2\n        self.c += 1\n")


@pytest.fixture
def watched(monkeypatch):
    """Every attribute write on a part or the worker: (class, attribute, the writer's self is the part)."""
    writes: list[tuple[str, str, bool, str]] = []

    def watching(part):
        def __setattr__(self, name, value):
            frame = sys._getframe(1)
            writer = frame.f_locals.get("self")
            writes.append((part.__name__, name, writer is self, frame.f_code.co_qualname))
            object.__setattr__(self, name, value)

        return __setattr__

    for part in PARTS:
        monkeypatch.setattr(part, "__setattr__", watching(part), raising=False)
    return writes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch", [None, 10], ids=["per-delivery", "batch"])
def test_no_part_writes_another_parts_state_while_it_drains(watched, batch, monkeypatch):
    failing = register_guest(name="Fails Once")
    for n in range(5):
        register_guest(name=f"Guest {n}")
    transport.publish_raw([b"not json"])  # a rejection
    failed = []

    def handler(message, ack, pause=None):
        if message.registration_id == failing.pk and "one" not in failed:
            failed.append("one")
            raise RuntimeError("the handler broke once")
        return handle(message, ack, pause)

    registrations = channel.current()
    real_batch = registrations.handle_batch

    def handle_batch(messages, rejections, ack_all, pause, stored):
        if "batch" not in failed:  # the batch fails, then its deliveries run one by one
            failed.append("batch")
            raise RuntimeError("the batch broke once")
        return real_batch(messages, rejections, ack_all, pause, stored)

    monkeypatch.setattr(registrations, "handle_batch", handle_batch)
    monkeypatch.setattr(loop, "RETRY_PAUSE", 0)
    worker = Worker(handler=handler, stdout=io.StringIO(), batch=batch)
    worker.connect()
    try:
        for _ in range(3):
            try:
                worker.drain()  # the failure is handed back (redelivered next), then the rest
            except RuntimeError:
                continue
            break
        worker.process_or_hand_back(worker.receiver.take())  # service mode's settle: nothing left, nothing handed
    finally:
        worker.close()
    assert "one" in failed and worker.report.totals() == (6, 1)
    assert worker.settler.counts()["failed"] == 1

    foreign = sorted({(part, name, where) for part, name, own, where in watched if not own})
    assert foreign == []
    seen = {(part, name) for part, name, _, _ in watched}
    assert {
        ("Settler", "failed"),
        ("Report", "handled"),
        ("Report", "rejected"),
        ("Connections", "suspected"),
        ("Receiver", "consumer"),
    } <= seen
    assert ("Settler", "current_acked") in seen if not batch else ("Settler", "on") in seen
