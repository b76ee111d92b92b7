"""The simulator's data plane in the kernel: one nftables table per simulator holding
kube-proxy's rules (nftables mode) for its Services and a CNI's rules for its
NetworkPolicies (sim.network.netpol compiles them). Written whole, atomically (`nft -f`), by
sim.network.dataplane whenever something they depend on changes.

Pods share one network namespace (the run's), so every connection, from a pod or from
another program there, takes the output path: the rules hang on the output hook.
- kube-proxy: `ip daddr . tcp dport` of a cluster IP or load-balancer address → DNAT to
  one of the Service's endpoints chosen by `numgen random` (kube-proxy's nftables mode),
  in a nat chain at priority dstnat; a Service port without endpoints is rejected (ICMP
  port unreachable: ECONNREFUSED), as kube-proxy's `reject-chain` does.
- NetworkPolicy, in a filter chain after the DNAT (so it sees the endpoint a connection
  really goes to): only a connection's first packet (conntrack NEW) is judged, replies
  and established connections pass. The source is the pod whose cgroup owns the socket
  (`socket cgroupv2 level 2`, sim.kubelet.cgroups), or, outside every pod of this cluster, the
  host at its address; a connection from the node network (the kubelet's probes, which
  leave from their node's address) always passes, as NetworkPolicy admits a pod's node.
  A refused connection is rejected with ICMP "administratively
  prohibited" (the client gets EHOSTUNREACH, "No route to host", at once, never mistaken
  for a closed port), or with `deny = "drop"` silently dropped (the client's SYNs go
  unanswered until it times out), the default of Calico and Cilium.

Only TCP is handled: UDP and SCTP Services are not proxied and their connections not
policed (the simulator's pods speak HTTP; there is no DNS server to reach on 53/UDP).

Each simulator owns one table, named after its process (`gpu_reclaim_sim_<pid>_<start
time>_<n>`), and touches no other: tables of simulators that are gone (killed before
they could remove theirs) are removed by the next one to start.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .netpol import ALL_ADDRESSES, Box, Compiled, Interval

NFT = shutil.which("nft") or "/usr/sbin/nft"
PREFIX = "gpu_reclaim_sim_"
DENY_ACTIONS = {"reject": "reject with icmp type admin-prohibited", "drop": "drop"}
PRIORITY_DSTNAT, PRIORITY_FILTER = -100, 0
_counter = itertools.count()


@dataclass(frozen=True)
class Route:
    """One Service port: its addresses (cluster IP, load-balancer IPs) and endpoints."""

    name: str  # "namespace/service:port", for the chain's comment
    frontends: tuple[tuple[str, int], ...]
    backends: tuple[tuple[str, int], ...]


# --- the table ----------------------------------------------------------------------------

def table_name() -> str:
    """A name no other simulator on this machine has, from which `stale` can tell whether
    its owner still runs."""
    return f"{PREFIX}{os.getpid()}_{_start_time(os.getpid())}_{next(_counter)}"


def render(table: str, routes: list[Route], policy: Compiled | None, *, deny: str = "reject",
           comment: str = "", nodes: str | None = None) -> str:
    """The `nft -f` script that replaces the table with these rules, atomically."""
    out = [f"table ip {table}", f"delete table ip {table}", f"table ip {table} {{"]
    if comment:
        out.append(f"\tcomment {_quote(comment)}")
    owner: dict[tuple[str, int], int] = {}  # an address and port once (nft refuses duplicates)
    for i, r in enumerate(routes):
        for f in r.frontends:
            owner.setdefault(f, i)
    out += _set("services", ["type ipv4_addr . inet_service : verdict"],
                [f"{ip} . {port} : goto svc{i}" for (ip, port), i in owner.items() if routes[i].backends])
    out += _set("no_endpoints", ["type ipv4_addr . inet_service"],
                [f"{ip} . {port}" for (ip, port), i in owner.items() if not routes[i].backends])
    out += _chain("nat_output", [f"type nat hook output priority {PRIORITY_DSTNAT}; policy accept;",
                                 "ip daddr . tcp dport vmap @services"])
    for i, r in enumerate(routes):
        if r.backends:
            choices = ", ".join(f"{n} : {ip} . {port}" for n, (ip, port) in enumerate(r.backends))
            out += _chain(f"svc{i}", [f"comment {_quote(r.name)}", "meta l4proto tcp dnat ip addr . port to "
                                      f"numgen random mod {len(r.backends)} map {{ {choices} }}"])
    filter_rules = [f"type filter hook output priority {PRIORITY_FILTER}; policy accept;",
                    "ct state established,related accept",
                    "meta l4proto != tcp accept",
                    "ip daddr . tcp dport @no_endpoints counter reject"]
    if policy is not None:
        filter_rules += ["ct state != new accept",
                         "socket cgroupv2 level 2 @pods goto from_pod",
                         "goto from_host"]
    out += _chain("filter_output", filter_rules)
    if policy is not None:
        out += _policy(policy, DENY_ACTIONS[deny], nodes)
    out.append("}")
    return "\n".join(out) + "\n"


def _policy(c: Compiled, deny: str, nodes: str | None = None) -> list[str]:
    cgroup = "typeof socket cgroupv2 level 2"
    boxes = ["typeof ip daddr . tcp dport", "flags interval"]
    # every pod that runs a process: its connections are a pod's, whatever the rules say of it
    out = _set("pods", [cgroup], [_quote(p) for p in sorted(c.own)])
    out += _set("ingress_isolated", ["type ipv4_addr"], sorted(c.ingress_isolated, key=ipaddress.IPv4Address))
    out += _set("egress_isolated", [cgroup], [_quote(p) for p in sorted(c.egress_isolated)])
    egress, ingress_pods, ingress_hosts = [], [], []
    for k, rule in enumerate(c.egress):
        out += _set(f"eg{k}_from", [cgroup], [_quote(p) for p in sorted(rule.from_pods)])
        out += _set(f"eg{k}_to", boxes, [_box(b) for b in rule.to])
        egress.append(f"socket cgroupv2 level 2 @eg{k}_from ip daddr . tcp dport @eg{k}_to return"
                      f" comment {_quote(rule.name)}")
    for k, r in enumerate(c.ingress):
        out += _set(f"in{k}_to", boxes, [_box(b) for b in r.to])
        if r.from_pods is None:
            ingress_pods.append(f"ip daddr . tcp dport @in{k}_to accept comment {_quote(r.name)}")
        elif r.from_pods:
            out += _set(f"in{k}_pods", [cgroup], [_quote(p) for p in sorted(r.from_pods)])
            ingress_pods.append(f"ip daddr . tcp dport @in{k}_to socket cgroupv2 level 2 @in{k}_pods accept"
                                f" comment {_quote(r.name)}")
        if r.from_hosts == [ALL_ADDRESSES]:
            ingress_hosts.append(f"ip daddr . tcp dport @in{k}_to accept comment {_quote(r.name)}")
        elif r.from_hosts:
            out += _set(f"in{k}_hosts", ["type ipv4_addr", "flags interval"], [_range(i) for i in r.from_hosts])
            ingress_hosts.append(f"ip daddr . tcp dport @in{k}_to ip saddr @in{k}_hosts accept"
                                 f" comment {_quote(r.name)}")
    # a pod's connection to itself, to its own address or through a Service (sim.network.netpol)
    out += _set("self", [f"{cgroup} . ip daddr"], [f"{_quote(cg)} . {ip}" for cg, ip in sorted(c.own.items())])
    out += _chain("from_pod", ["socket cgroupv2 level 2 . ip daddr @self accept",
                               "jump egress", "goto ingress_from_pod"])
    out += _chain("egress", ["socket cgroupv2 level 2 != @egress_isolated return", *egress,
                             f"counter {deny} comment {_quote('refused: egress')}"])
    isolated = "ip daddr != @ingress_isolated accept"
    out += _chain("ingress_from_pod", [isolated, *ingress_pods,
                                       f"counter {deny} comment {_quote('refused: ingress from a pod')}"])
    # NetworkPolicy always admits a pod's node (its kubelet's probes), here the node network
    node = [f"ip saddr {nodes} accept comment {_quote('the node: kubelet probes')}"] if nodes else []
    out += _chain("from_host", [isolated, *node, *ingress_hosts,
                                f"counter {deny} comment {_quote('refused: ingress from outside the cluster')}"])
    return out


def _set(name: str, declaration: list[str], elements: list[str]) -> list[str]:
    kind = "map" if ":" in declaration[0] else "set"
    out = [f"\t{kind} {name} {{", *(f"\t\t{d}" for d in declaration)]
    if elements:
        out.append("\t\telements = { " + ",\n\t\t\t".join(elements) + " }")
    return out + ["\t}"]


def _chain(name: str, rules: list[str]) -> list[str]:
    return [f"\tchain {name} {{", *(f"\t\t{r}" for r in rules), "\t}"]


def _quote(text: str) -> str:
    return '"' + re.sub(r'["\\\n]', "_", text) + '"'


def _range(i: Interval) -> str:
    low, high = str(ipaddress.IPv4Address(i[0])), str(ipaddress.IPv4Address(i[1]))
    return low if low == high else f"{low}-{high}"


def _box(b: Box) -> str:
    (p_low, p_high) = b[1]
    return f"{_range(b[0])} . {p_low if p_low == p_high else f'{p_low}-{p_high}'}"


# --- the kernel ---------------------------------------------------------------------------

def unavailable() -> str | None:
    """Why this machine cannot have the simulator's tables, or None when it can."""
    if os.geteuid() != 0:
        return "not root"
    if not Path(NFT).exists():
        return f"{NFT} is missing (Debian package nftables)"
    try:
        proc = subprocess.run([NFT, "list", "tables"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nft does not run: {e}"
    if proc.returncode != 0:
        return f"nft list tables: {proc.stderr.strip()}"
    return None


async def apply(script: str) -> None:
    proc = await asyncio.create_subprocess_exec(NFT, "-f", "-", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    _, err = await proc.communicate(script.encode())
    if proc.returncode != 0:
        raise NftError(err.decode(errors="replace").strip())


def delete(table: str) -> None:
    subprocess.run([NFT, "delete", "table", "ip", table], capture_output=True, timeout=10)


def stale() -> list[str]:
    """This machine's simulator tables whose simulator is gone."""
    proc = subprocess.run([NFT, "list", "tables"], capture_output=True, text=True, timeout=10)
    gone = []
    for line in proc.stdout.splitlines():
        m = re.fullmatch(rf"table ip ({PREFIX}(\d+)_(\d+)_\d+)", line.strip())
        if m and _start_time(int(m.group(2))) != m.group(3):
            gone.append(m.group(1))
    return gone


class NftError(RuntimeError):
    """nft refused a script; the message is its own."""


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot): with its PID, it names one
    process, also after the PID is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]
