"""Separate machines on one host, for partition tests: network namespaces of
the test's own, joined by a bridge, with private addresses that exist only
inside them (10.213.X.0/24, X random per run). The host reaches them through
the bridge's address (.254). Links are cut with iptables DROP rules inside a
namespace and healed with `iptables -F`. Everything is deleted on close, also
when the test fails; no traffic leaves for any other address.

Needs root, `ip` (iproute2) and `iptables`; `why_not()` says which is missing.
"""

import os
import random
import shutil
import subprocess
import uuid


def why_not() -> str:
    """Why namespaces cannot be made here, or "" when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {'iproute2' if tool == 'ip' else tool})"
    probe = f"njprobe{uuid.uuid4().hex[:6]}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"`ip netns add` fails here: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def free_subnet() -> str:
    """A 10.213.X prefix no route on this host uses: bin/test's lanes run partition tests
    and soaks side by side, each with a network of its own."""
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    free = [x for x in range(1, 250) if f"10.213.{x}.0/" not in routes]
    return f"10.213.{random.choice(free)}"


class Network:
    """`names` namespaces on one bridge; `address[name]` is each one's address."""

    def __init__(self, names: list[str]) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.subnet = free_subnet()
        self.bridge = f"njb{self.tag}"
        self.host_address = f"{self.subnet}.254"
        self.namespaces = {name: f"nj{self.tag}{name}" for name in names}
        self.address = {name: f"{self.subnet}.{i}" for i, name in enumerate(names, start=1)}
        self.veths: list[str] = []

    def __enter__(self) -> "Network":
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for index, (name, namespace) in enumerate(self.namespaces.items(), start=1):
                run("ip", "netns", "add", namespace)
                outside, inside = f"njv{self.tag}{index}", f"njp{self.tag}{index}"
                run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
                self.veths.append(outside)
                run("ip", "link", "set", outside, "master", self.bridge, "up")
                run("ip", "link", "set", inside, "netns", namespace)
                self.exec(name, "ip", "addr", "add", f"{self.address[name]}/24", "dev", inside)
                self.exec(name, "ip", "link", "set", inside, "up")
                self.exec(name, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def prefix(self, name: str) -> list[str]:
        """What to put before a command to run it on that "machine"."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    def exec(self, name: str, *command: str) -> None:
        run(*self.prefix(name), *command)

    def cut(self, name: str, *, only_from: str | None = None) -> None:
        """Drop everything between this namespace and the others (or only
        `only_from`), both ways; loopback inside it keeps working."""
        peers = ["-s", self.address[only_from]] if only_from else []
        targets = ["-d", self.address[only_from]] if only_from else []
        self.exec(name, "iptables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT")
        self.exec(name, "iptables", "-A", "INPUT", *peers, "-j", "DROP")
        self.exec(name, "iptables", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
        self.exec(name, "iptables", "-A", "OUTPUT", *targets, "-j", "DROP")

    def heal(self, name: str) -> None:
        self.exec(name, "iptables", "-F")

    def close(self) -> None:
        for namespace in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        for veth in self.veths:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
