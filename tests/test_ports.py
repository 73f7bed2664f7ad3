"""The ports tests, the chaos soak and the benchmark start servers on. A server
that is stopped or killed and started again on its port (a cluster node, the
soak's broker, redis-server) finds it taken if, meanwhile, the kernel gave it
to a client as its own end of a connection, which it does with any free port
of its ephemeral range (seen: a cluster node's restart failing with
eaddrinuse). So the ports are all outside that range."""

import socket

import pytest

from devtools.ports import ephemeral_range, free_cluster_port, free_port, port_is_free

pytestmark = pytest.mark.fast

# What each kind of port stands for: the port itself and the ones beside it the servers take.
KINDS = {
    "plain": (lambda: free_port(), (0,)),
    "rabbitmq": (lambda: free_port(rabbitmq=True), (0, 10000, 20000, 20001)),
    "cluster": (lambda: free_cluster_port(3), (0, 1, 2, 10000, 10001, 10002, 19990, 20000, 20001, 20002)),
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_port_is_free_and_outside_the_kernels_ephemeral_range(kind):
    pick, offsets = KINDS[kind]
    low, high = ephemeral_range()
    for _ in range(20):
        base = pick()
        for port in (base + offset for offset in offsets):
            assert 1024 <= port <= 65535
            assert not low <= port <= high, f"{port} is in the ephemeral range {low}-{high}"
            assert port_is_free(port)


def test_no_port_is_handed_out_twice_in_one_process_even_before_it_is_bound():
    taken: set[int] = set()
    for pick, offsets in KINDS.values():
        for _ in range(30):
            base = pick()
            ports = {base + offset for offset in offsets}
            assert not ports & taken
            taken |= ports


def test_a_port_in_use_is_never_handed_out():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not port_is_free(server.getsockname()[1])


def test_the_ephemeral_range_is_the_kernels():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
        assert ephemeral_range() == tuple(int(n) for n in file.read().split())
