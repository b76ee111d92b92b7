"""Addresses: one loopback IP per node and per pod, so every pod's server binds its own
address and port 8888 can be used by all of them at once (127.0.0.0/8 all reaches lo)."""

from __future__ import annotations

import ipaddress


class AddressPool:
    """Hands out host addresses of a network and takes them back."""

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.ip_network(cidr)
        if not self.network.subnet_of(ipaddress.ip_network("127.0.0.0/8")):
            raise ValueError(f"{cidr}: simulated addresses must lie in 127.0.0.0/8 (loopback)")
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


class PodNetwork:
    def __init__(self, pod_cidr: str, node_cidr: str = "127.100.0.0/16") -> None:
        self.pods = AddressPool(pod_cidr)
        self.nodes = AddressPool(node_cidr)
