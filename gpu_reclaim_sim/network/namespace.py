"""The run's own network namespace (issue 37): what a run of the simulator and each test
worker lives in, so that the cluster's addresses can be the non-special ones a real cluster
uses (the real API server refuses loopback addresses in EndpointSlices and as its advertise
address) and its traffic can go nowhere else.

`enter` moves the calling process (its main thread, before it starts servers: what it starts
afterwards inherits the namespace) into a new network namespace with only its loopback
interface up, and makes each of `NETWORKS` local to it (a `local` route, as 127.0.0.0/8
always is): a process binds any address of them, with no interface per address, and
every connection to them stays inside. Nothing outside the namespace can be reached (no
route), and nothing outside reaches in. A socket belongs to the namespace its creator was in
when it made it: one opened before `enter` stays outside (sim.network.relay's way in), and a
thread that `join`s the namespace the process started in (`origin`) makes sockets there (the
way out to a port of the machine's loopback).

`python -m gpu_reclaim_sim.network.namespace COMMAND [ARG...]` runs a command in a new one:
programs that must reach the pods' addresses as a run's test worker does (KubeSpawner's own
suite, scripts/kubespawner_suite.sh) run there with the `run` they start, which then stays in it.

Needs root (CAP_SYS_ADMIN) and iproute2's `ip`.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import shutil
import socket
import subprocess
import sys

CLONE_NEWNET = 0x40000000
NODES = ipaddress.IPv4Network("10.0.0.0/16")  # the nodes, the API server's advertise address first
PODS = ipaddress.IPv4Network("10.244.0.0/16")
SERVICES = ipaddress.IPv4Network("10.96.0.0/16")  # kube-apiserver's --service-cluster-ip-range
NETWORKS = (NODES, PODS, SERVICES)
API_SERVER_ADDRESS = str(NODES.network_address + 1)  # 10.0.0.1

_entered = False
_origin: int | None = None  # a descriptor of the namespace the process was in before `enter`


def available() -> bool:
    """Whether this process can make a network namespace of its own."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def inside() -> bool:
    """Whether this process lives in a run's network namespace: it entered one (`enter`), or
    its parent did (the pods' network is local here)."""
    if not _entered:
        try:
            with socket.socket() as s:
                s.bind((str(PODS.network_address + 1), 0))
        except OSError:
            return False
    return True


def holds(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether `network` lies inside one of the run's networks."""
    return isinstance(network, ipaddress.IPv4Network) and any(network.subnet_of(n) for n in NETWORKS)


def enter() -> None:
    """Move this process into a new network namespace with `NETWORKS` local to it."""
    global _entered, _origin
    if _entered:
        return
    origin = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _call("unshare", CLONE_NEWNET)
    except OSError:
        os.close(origin)
        raise
    _origin = origin
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for network in NETWORKS:
        subprocess.run(["ip", "route", "add", "local", str(network), "dev", "lo"], check=True)
    _entered = True


def origin() -> int | None:
    """A descriptor of the network namespace this process was in before it entered its own
    (`enter`); None where it entered none."""
    return _origin


def join(descriptor: int) -> None:
    """Move the calling thread (only it: a network namespace is per thread) into the network
    namespace `descriptor` refers to; the sockets it makes from then on are that namespace's."""
    _call("setns", descriptor, CLONE_NEWNET)


def _call(name: str, *args: int) -> None:
    """libc's `name`(`args`), its errno raised as OSError (Python 3.11 has no os.setns)."""
    if getattr(ctypes.CDLL(None, use_errno=True), name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m gpu_reclaim_sim.network.namespace COMMAND [ARG...]")
    enter()
    os.execvp(sys.argv[1], sys.argv[1:])
