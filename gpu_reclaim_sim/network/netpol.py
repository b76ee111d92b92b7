"""NetworkPolicy (networking.k8s.io/v1) as a CNI that enforces it reads it: which pods
a policy isolates, and which new connections its rules allow. Pure: a snapshot of pods,
namespaces and policies in, the compiled rules out (sim.network.nftables writes them for the
kernel; `Compiled.allows` answers for one connection with the same logic, for tests of
the model and for tools). What the API accepts as a policy is the real API server's.

The semantics, from the API reference and the concept page:
- a pod is isolated for ingress (egress) when a policy of its namespace with `Ingress`
  (`Egress`) in `policyTypes` selects it; then a connection is allowed only if a rule of
  one of those policies allows it (rules only add: no order, no deny). Both ends must
  agree: the source pod's egress and the destination pod's ingress;
- a rule with no `from`/`to` allows every peer, with no `ports` every port; a peer is a
  `podSelector` (pods of the policy's namespace), a `namespaceSelector` (every pod of the
  matching namespaces), both (pods matching the one in namespaces matching the other) or
  an `ipBlock` (`cidr` less each `except`);
- a port is a number, a range (`endPort`) or a container port's name, resolved on the
  pod at the other end (a named port never matches an address that is no pod's); only
  TCP is enforced here (sim.network.nftables says why), so a rule whose ports are all UDP or
  SCTP allows no TCP connection;
- a pod's connection to itself is always allowed: to its own address it never leaves
  its network namespace; through a Service that sends it back to itself ("hairpin") it
  is implementation-defined, and the common plugins let it through (kube-proxy
  masquerades it to the node's address, which a pod cannot block under Calico; Cilium
  and Antrea exempt it). sig-network's newer ClusterNetworkPolicy polices the hairpin
  case; NetworkPolicy does not say.

Addresses (`AddressView`): the simulator's pods and Services have loopback addresses, but
a real cluster's are private ones, and charts rely on that (z2jh's `privateIPs` and
`nonPrivateIPs` egress rules: 10.0.0.0/8 is the cluster, 0.0.0.0/0 less the private
ranges is the internet). So ipBlocks see an address of the pod or service network
127.a.b.c as 10.a.b.c, and a CIDR written inside one of those networks (a pod's
`status.podIP`/32) as the same; every other address (the host, 127.0.0.1) as it is.

Sources: a pod's connection is known by its cgroup (pods share one network
namespace, the run's, so the source address says nothing); a connection from outside every pod (the
host: tests, a hub started outside the cluster) comes from outside the cluster, at its
own address (127.0.0.1): only an ipBlock, or a rule with no `from`, admits it.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..scenario import LOOPBACK
from ..selectors import selector_requirements

Interval = tuple[int, int]  # inclusive, of addresses (as integers) or of ports
Box = tuple[Interval, Interval]  # addresses × ports

ALL_ADDRESSES: Interval = (0, 2**32 - 1)
ALL_PORTS: Interval = (0, 65535)
VIEW_SHIFT = (127 - 10) << 24  # 127.a.b.c is seen as 10.a.b.c


# --- what the compiler reads --------------------------------------------------------------

@dataclass(frozen=True)
class Pod:
    """A pod with an address, as the network plugin knows it."""

    uid: str
    namespace: str
    labels: Mapping[str, str]
    ip: str
    cgroup: str | None  # where its sockets are (the nftables path); None: it runs no process
    named_ports: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (name, protocol) -> port

    @classmethod
    def of(cls, obj: Mapping[str, Any], ip: str, cgroup: str | None) -> "Pod":
        ports = {}
        for c in (obj.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") and p.get("containerPort"):
                    ports[(p["name"], p.get("protocol", "TCP"))] = p["containerPort"]
        meta = obj["metadata"]
        return cls(meta["uid"], meta["namespace"], dict(meta.get("labels") or {}), ip, cgroup, ports)

    @functools.cached_property
    def address(self) -> int:
        return _address(self.ip)


class AddressView:
    """How ipBlocks see addresses (see the module's docstring)."""

    def __init__(self, cluster_networks: Iterable[ipaddress.IPv4Network]) -> None:
        self.networks = [n for n in cluster_networks if n.subnet_of(LOOPBACK)]
        self._actual = _union([(int(n.network_address), int(n.broadcast_address)) for n in self.networks])

    def of(self, address: int) -> int:
        return address - VIEW_SHIFT if _inside(address, self._actual) else address

    def block(self, cidr: str) -> Interval:
        """A CIDR of a policy (an IPv4 one: `ip_block` leaves IPv6 out), in the view's terms."""
        net = ipaddress.IPv4Network(cidr, strict=False)
        low, high = int(net.network_address), int(net.broadcast_address)
        if any(net.subnet_of(n) for n in self.networks):
            low, high = low - VIEW_SHIFT, high - VIEW_SHIFT
        return low, high

    def ip_block(self, ipb: Mapping[str, Any]) -> list[Interval]:
        """The view addresses an ipBlock selects (IPv6 blocks select none: the simulator's
        network is IPv4)."""
        if ipaddress.ip_network(ipb["cidr"], strict=False).version != 4:
            return []
        excepts = [self.block(e) for e in ipb.get("except") or [] if ipaddress.ip_network(e, strict=False).version == 4]
        return _subtract([self.block(ipb["cidr"])], excepts)

    def actual(self, view: list[Interval]) -> list[Interval]:
        """The real addresses whose view lies in `view`."""
        shifted = _clip([(a + VIEW_SHIFT, b + VIEW_SHIFT) for a, b in view])
        return _union(_subtract(view, self._actual) + _intersect(shifted, self._actual))


# --- what it produces ---------------------------------------------------------------------

@dataclass
class IngressRule:
    """One ingress rule of one policy: connections to `to` from `from_pods` (cgroups;
    None: every pod) or, from outside every pod, from the addresses `from_hosts`."""

    name: str  # "namespace/policy ingress[i]"
    to: list[Box]
    from_pods: frozenset[str] | None
    from_hosts: list[Interval]


@dataclass
class EgressRule:
    """One egress rule of one policy: connections from `from_pods` (cgroups) to `to`."""

    name: str
    from_pods: frozenset[str]
    to: list[Box]


@dataclass
class Compiled:
    own: Mapping[str, str]  # the cgroup of every pod that runs a process -> its address
    ingress_isolated: frozenset[str]  # pod IPs
    egress_isolated: frozenset[str]  # cgroups
    ingress: list[IngressRule]
    egress: list[EgressRule]

    def allows(self, src: Pod | None, dst_ip: str, port: int, *, src_ip: str = "127.0.0.1") -> bool:
        """Whether a new TCP connection from `src` (None: from outside every pod, at
        `src_ip`) to `dst_ip:port` (after the Service's DNAT) is allowed."""
        dst = _address(dst_ip)
        if src is not None and src.cgroup is not None and src.ip == dst_ip:
            return True  # to itself
        if src is not None and src.cgroup in self.egress_isolated:
            if not any(src.cgroup in r.from_pods and _in_boxes(r.to, dst, port) for r in self.egress):
                return False
        if dst_ip not in self.ingress_isolated:
            return True
        source = _address(src_ip)
        for r in self.ingress:
            if not _in_boxes(r.to, dst, port):
                continue
            if src is not None and src.cgroup is not None:
                if r.from_pods is None or src.cgroup in r.from_pods:
                    return True
            elif _inside(source, r.from_hosts):
                return True
        return False


# --- the compiler -------------------------------------------------------------------------

def compile_policies(policies: Sequence[Mapping[str, Any]], pods: Sequence[Pod],
                     namespaces: Mapping[str, Mapping[str, str]], view: AddressView) -> Compiled:
    """`namespaces`: name -> labels."""
    by_ns: dict[str, list[Pod]] = {}
    for p in pods:
        by_ns.setdefault(p.namespace, []).append(p)
    select = _Selector(by_ns, namespaces)
    in_isolated: set[str] = set()
    eg_isolated: set[str] = set()
    ingress: list[IngressRule] = []
    egress: list[EgressRule] = []
    for policy in policies:
        ns = policy["metadata"]["namespace"]
        name = f"{ns}/{policy['metadata']['name']}"
        spec = policy.get("spec") or {}
        subjects = select.pods(ns, spec.get("podSelector") or {})
        types = spec.get("policyTypes") or ["Ingress"]
        if "Ingress" in types:
            in_isolated.update(p.ip for p in subjects)
            for i, rule in enumerate(spec.get("ingress") or []):
                numbers, names = _ports(rule.get("ports"))
                to = [b for p in subjects for b in _boxes([(p.address, p.address)], numbers)
                      + _named_boxes([p], names)]
                if not to:
                    continue
                peers = rule.get("from") or []
                if not peers:
                    ingress.append(IngressRule(f"{name} ingress[{i}]", to, None, [ALL_ADDRESSES]))
                    continue
                from_pods: set[str] = set()
                from_hosts: list[Interval] = []
                for peer in peers:
                    if "ipBlock" in peer:
                        block = view.ip_block(peer["ipBlock"])
                        from_pods.update(p.cgroup for p in pods if p.cgroup and _inside(view.of(p.address), block))
                        from_hosts += view.actual(block)
                    else:
                        from_pods.update(p.cgroup for p in select.peer(peer, ns) if p.cgroup)
                ingress.append(IngressRule(f"{name} ingress[{i}]", to, frozenset(from_pods), _union(from_hosts)))
        if "Egress" in types:
            sources = frozenset(p.cgroup for p in subjects if p.cgroup)
            eg_isolated.update(sources)
            if not sources:
                continue
            for i, rule in enumerate(spec.get("egress") or []):
                numbers, names = _ports(rule.get("ports"))
                peers = rule.get("to") or []
                to = []
                if not peers:
                    to = _boxes([ALL_ADDRESSES], numbers) + _named_boxes(pods, names)
                for peer in peers:
                    if "ipBlock" in peer:
                        block = view.ip_block(peer["ipBlock"])
                        to += _boxes(view.actual(block), numbers)
                        to += _named_boxes([p for p in pods if _inside(view.of(p.address), block)], names)
                    else:
                        targets = select.peer(peer, ns)
                        to += _boxes([(p.address, p.address) for p in targets], numbers) + _named_boxes(targets, names)
                if to:
                    egress.append(EgressRule(f"{name} egress[{i}]", sources, disjoint(to)))
    return Compiled({p.cgroup: p.ip for p in pods if p.cgroup}, frozenset(in_isolated), frozenset(eg_isolated),
                    [IngressRule(r.name, disjoint(r.to), r.from_pods, r.from_hosts) for r in ingress], egress)


class _Selector:
    """Which pods a selector or a peer selects, each selector evaluated once per compile."""

    def __init__(self, by_ns: Mapping[str, list[Pod]], namespaces: Mapping[str, Mapping[str, str]]) -> None:
        self.by_ns, self.namespaces = by_ns, namespaces
        self._cache: dict[str, list[Pod]] = {}

    def pods(self, ns: str, selector: Mapping[str, Any]) -> list[Pod]:
        key = json.dumps(["pods", ns, selector], sort_keys=True)
        if key not in self._cache:
            reqs = selector_requirements(selector) or []
            self._cache[key] = [p for p in self.by_ns.get(ns, []) if all(r.matches(p.labels) for r in reqs)]
        return self._cache[key]

    def peer(self, peer: Mapping[str, Any], ns: str) -> list[Pod]:
        """A peer's pods: its podSelector's (all when absent) in the policy's namespace, or in
        every namespace its namespaceSelector selects."""
        if peer.get("namespaceSelector") is None:
            selected = [ns]
        else:
            reqs = selector_requirements(peer["namespaceSelector"]) or []
            selected = [n for n, labels in self.namespaces.items() if all(r.matches(labels) for r in reqs)]
        return [p for n in selected for p in self.pods(n, peer.get("podSelector") or {})]


def _ports(ports: Sequence[Mapping[str, Any]] | None) -> tuple[list[Interval], list[str]]:
    """A rule's TCP ports: numbers and ranges, and names."""
    if not ports:
        return [ALL_PORTS], []
    numbers: list[Interval] = []
    names: list[str] = []
    for p in ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        port = p.get("port")
        if port is None:
            numbers.append(ALL_PORTS)
        elif isinstance(port, int):
            numbers.append((port, p.get("endPort") or port))
        else:
            names.append(port)
    return numbers, names


def _boxes(addresses: list[Interval], ports: list[Interval]) -> list[Box]:
    return [(a, p) for a in addresses for p in ports]


def _named_boxes(pods: Iterable[Pod], names: list[str]) -> list[Box]:
    out: list[Box] = []
    for p in pods:
        for name in names:
            port = p.named_ports.get((name, "TCP"))
            if port:
                out.append(((p.address, p.address), (port, port)))
    return out


def _in_boxes(boxes: list[Box], address: int, port: int) -> bool:
    return any(a[0] <= address <= a[1] and p[0] <= port <= p[1] for a, p in boxes)


# --- intervals ----------------------------------------------------------------------------

def _union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for low, high in sorted(intervals):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    cuts = _union(b)
    for low, high in _union(a):
        for c_low, c_high in cuts:
            if c_high < low or c_low > high:
                continue
            if c_low > low:
                out.append((low, c_low - 1))
            low = c_high + 1
            if low > high:
                break
        if low <= high:
            out.append((low, high))
    return out


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    return _subtract(_union(a), _subtract(_union(a), b))


def _clip(intervals: list[Interval]) -> list[Interval]:
    return [(low, min(high, ALL_ADDRESSES[1])) for low, high in intervals if low <= ALL_ADDRESSES[1]]


def _address(ip: str) -> int:
    return int.from_bytes(socket.inet_aton(ip), "big")


def _inside(value: int, intervals: list[Interval]) -> bool:
    return any(low <= value <= high for low, high in intervals)


def disjoint(boxes: Iterable[Box]) -> list[Box]:
    """The same area as `boxes`, in boxes that do not overlap (nftables refuses
    overlapping elements of an interval set): a sweep over the address boundaries, each
    stretch of addresses with the union of the ports that cover it, stretches with equal
    ports merged."""
    by_addresses: dict[Interval, list[Interval]] = {}
    for a, p in boxes:
        by_addresses.setdefault(a, []).append(p)
    if not by_addresses:
        return []
    addresses = sorted(by_addresses)
    if all(addresses[i][1] < addresses[i + 1][0] for i in range(len(addresses) - 1)):  # the usual case
        out = [(a, p) for a in addresses for p in _union(by_addresses[a])]
    else:
        out = _sweep([(a, p) for a in addresses for p in by_addresses[a]])
    # merge neighbouring stretches that have the same ports
    merged: dict[Interval, list[Interval]] = {}
    for a, p in out:
        runs = merged.setdefault(p, [])
        if runs and runs[-1][1] + 1 == a[0]:
            runs[-1] = (runs[-1][0], a[1])
        else:
            runs.append(a)
    return sorted((a, p) for p, runs in merged.items() for a in runs)


def _sweep(boxes: list[Box]) -> list[Box]:
    points = sorted({a[0] for a, _ in boxes} | {a[1] + 1 for a, _ in boxes})
    starts: dict[int, list[Interval]] = {}
    ends: dict[int, list[Interval]] = {}
    for a, p in boxes:
        starts.setdefault(a[0], []).append(p)
        ends.setdefault(a[1] + 1, []).append(p)
    active: dict[Interval, int] = {}
    out: list[Box] = []
    for i, point in enumerate(points[:-1]):
        for p in ends.get(point, ()):
            active[p] -= 1
            if not active[p]:
                del active[p]
        for p in starts.get(point, ()):
            active[p] = active.get(p, 0) + 1
        stretch = (point, points[i + 1] - 1)
        out += [(stretch, p) for p in _union(active)]
    return out
