"""Free loopback ports for the servers that tests, the chaos soak and the
benchmark start. A RabbitMQ node started by bin/rabbitmq-node on PORT also
listens on PORT + 10000 (management) and PORT + 20000 (distribution), and
its epmd on PORT + 20001.

Every port is outside the kernel's ephemeral range (ip_local_port_range,
32768-60999 by default). The kernel gives any free port of that range to a
client as its end of a connection, so a server stopped and started again on
such a port can find it taken (seen: a cluster node restarted while workers
reconnected failed its boot with eaddrinuse), and a client connecting to a
port where nothing listens can even be connected to itself. Outside the range
only a server that binds it on purpose takes a port. No port is handed out
twice in one process, even before its server has bound it."""

import random
import socket
from pathlib import Path

# Ports below this are left to the machine's usual services (5432, 5672, 6379, 8000...).
LOWEST = 10000
# Every port handed out by this process, with the ones beside it that its server takes.
_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel picks a client's end of a connection from."""
    try:
        low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base(offsets: tuple[int, ...]) -> int:
    """A port P such that every P + offset is free, outside the ephemeral range
    and not handed out before; then handed out."""
    low, high = ephemeral_range()
    top = 65535 - max(offsets)
    for lowest in (LOWEST, 1024):  # below LOWEST only if the range leaves nothing above it
        if lowest > top:
            continue
        for _ in range(2000):
            base = random.randint(lowest, top)
            ports = [base + offset for offset in offsets]
            if any(low <= port <= high or port in _handed_out for port in ports):
                continue
            if all(port_is_free(port) for port in ports):
                _handed_out.update(ports)
                return base
    raise RuntimeError(f"No free ports on 127.0.0.1 outside the ephemeral range {low}-{high} for offsets {offsets}.")


def free_port(*, rabbitmq: bool = False) -> int:
    """A free port; with rabbitmq=True, one whose +10000, +20000 and +20001 are free too."""
    return _free_base((0, 10000, 20000, 20001) if rabbitmq else (0,))


def free_cluster_port(nodes: int) -> int:
    """A base port for bin/rabbitmq-cluster: node I takes BASE+I-1, +10000 and
    +20000 of it, and the cluster's epmd BASE+19990; all of them free."""
    return _free_base((19990, *(i + offset for i in range(nodes) for offset in (0, 10000, 20000))))
