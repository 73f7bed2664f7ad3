"""The supervisor of `worker --processes N` (nightjar_delivery/supervisor.py),
its pure parts: the restart backoff and the children's command. Its processes
are proven in test_worker_processes.py."""

import io

import pytest

from nightjar_delivery import supervisor

pytestmark = pytest.mark.fast


class DeadAtOnce:
    """A child process that has already exited with status 1."""

    pid = 4242

    def poll(self) -> int:
        return 1


def test_a_child_that_dies_at_start_waits_longer_each_time_up_to_the_bound(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: clock[0])
    boss = supervisor.Supervisor(command=["worker"], processes=1, stdout=io.StringIO(), stop_seconds=1)
    child = boss.children[0]
    waits = []
    for _ in range(8):
        child.proc, child.started = DeadAtOnce(), clock[0]
        boss.watch(child)  # its death: the next start waits
        waits.append(child.restart_at - clock[0])
        clock[0] = child.restart_at
    assert waits == [2, 4, 8, 16, 30, 30, 30, 30]
    # One that ran long before it died starts again at once (after the shortest wait).
    child.proc, child.started = DeadAtOnce(), clock[0]
    clock[0] += supervisor.STEADY_SECONDS
    boss.watch(child)
    assert child.restart_at - clock[0] == supervisor.BACKOFF_MIN


def test_the_children_run_the_command_without_processes():
    argv = ["manage.py", "worker", "--serve", "--processes", "3", "--channel", "tasks", "--processes=2", "--batch", "5"]
    assert supervisor.without_processes(argv) == [
        "manage.py",
        "worker",
        "--serve",
        "--channel",
        "tasks",
        "--batch",
        "5",
    ]
