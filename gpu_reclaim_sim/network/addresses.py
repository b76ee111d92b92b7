"""Addresses: one IP per node, per pod and per Service (in the run's network namespace, where
sim.network.namespace makes their networks local; on loopback without one), so every pod's
server binds its own address and port 8888 can be used by all of them at once. Service addresses (cluster IPs, load-balancer IPs) come from a network of their own,
like a cluster's --service-cluster-ip-range."""

from __future__ import annotations

import ipaddress
import random
import socket
from pathlib import Path
from ..scenario import on_loopback
from . import namespace


class AddressPool:
    """Hands out host addresses of a network and takes them back."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.ip_network(cidr)
        if not on_loopback(network) and not namespace.holds(network):
            raise ValueError(f"{cidr}: simulated addresses must lie in 127.0.0.0/8 (loopback) or in the "
                             f"run's network namespace ({', '.join(map(str, namespace.NETWORKS))})")
        self.network = network
        self._hosts = self.network.hosts()
        self._free: list[str] = []
        self._used: set[str] = set()

    def allocate(self) -> str:
        if self._free:
            ip = self._free.pop(0)
        else:
            try:
                ip = str(next(self._hosts))
            except StopIteration:
                raise RuntimeError(f"no free address left in {self.network}") from None
        self._used.add(ip)
        return ip

    def release(self, ip: str | None) -> None:
        if ip in self._used:
            self._used.discard(ip)
            self._free.append(ip)  # reused last, as a CNI's IPAM tends to


def _listening_second_octets() -> set[int]:
    """Second octets of the 127.x addresses something on this machine listens on."""
    octets: set[int] = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return octets
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN; the address is little-endian hex
            addr = bytes.fromhex(local.split(":")[0])[::-1]
            if addr[0] == 127:
                octets.add(addr[1])
    return octets


def free_pod_cidr(exclude: tuple[int, ...] | set[int] = ()) -> str:
    """A 127.x.0.0/16 nobody listens in, so two clusters on one machine (a demo and a
    test run) never hand out the same pod or service address — a hub would reach the
    wrong server. `exclude`: second octets already chosen."""
    taken = _listening_second_octets() | {0, 100} | set(exclude)  # 127.0.0.1 and our node addresses
    free = [x for x in range(101, 255) if x not in taken]
    if not free:
        raise RuntimeError("no free 127.x.0.0/16 left for pod addresses")
    return f"127.{random.choice(free)}.0.0/16"


class PodNetwork:
    """`pod_cidr` and `service_cidr` "auto" pick free loopback /16s (see `free_pod_cidr`);
    a socket listening in each keeps it taken for a cluster started later."""

    def __init__(self, pod_cidr: str, node_cidr: str = "127.100.0.0/16", service_cidr: str = "auto") -> None:
        self._claims: list[socket.socket] = []
        pod_cidr = self._claim(pod_cidr, set())
        self.pods = AddressPool(pod_cidr)
        self.nodes = AddressPool(node_cidr)
        self.services = ipaddress.IPv4Network(
            self._claim(service_cidr, {self.pods.network.network_address.packed[1]}))

    def _claim(self, cidr: str, exclude: set[int]) -> str:
        if cidr != "auto":
            return cidr
        cidr = free_pod_cidr(exclude)
        claim = socket.socket()
        claim.bind((str(ipaddress.ip_network(cidr).broadcast_address), 0))
        claim.listen(1)
        self._claims.append(claim)
        return cidr

    def close(self) -> None:
        for claim in self._claims:
            claim.close()
        self._claims.clear()
