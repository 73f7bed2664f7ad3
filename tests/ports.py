"""Free loopback ports for the servers that tests, the chaos soak and the
benchmark start. A RabbitMQ node started by bin/rabbitmq-node on PORT also
listens on PORT + 10000 (management) and PORT + 20000 (distribution), and
its epmd on PORT + 20001."""

import socket


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, rabbitmq: bool = False) -> int:
    """A free port; with rabbitmq=True, one whose +10000, +20000 and +20001 are free too."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if not rabbitmq:
            return port
        if port < 45000 and all(port_is_free(port + offset) for offset in (10000, 20000, 20001)):
            return port
    raise RuntimeError("No free ports on 127.0.0.1.")


def free_cluster_port(nodes: int) -> int:
    """A base port for bin/rabbitmq-cluster: node I takes BASE+I-1, +10000 and
    +20000 of it, and the cluster's epmd BASE+19990; all of them free."""
    for _ in range(200):
        base = free_port()
        wanted = [base + 19990] + [base + i + offset for i in range(nodes) for offset in (0, 10000, 20000)]
        if base < 40000 and all(port_is_free(port) for port in wanted):
            return base
    raise RuntimeError("No free port range on 127.0.0.1 for a cluster.")
