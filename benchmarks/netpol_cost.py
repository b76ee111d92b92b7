#!/usr/bin/env python
"""Benchmark: what the simulator's data plane (sim.dataplane: kube-proxy's nftables rules
and NetworkPolicy) costs, on this machine's kernel. Needs root and nftables.

Run it as `.venv/bin/python benchmarks/netpol_cost.py`. It builds, with the simulator's own
code (sim.netpol compiles, sim.nftables renders and loads), the table of a cluster of
`--pods` pods and `--policies` NetworkPolicies: z2jh's three (hub, proxy, single-user
servers, with their egress rules) and one per course (`course=cK` pods talk to each other
on 9000-9100), and `--services` Services of 10 endpoints each. The pods are cgroups
`gpu-reclaim-sim/pod<uid>` made for the run (removed after) and addresses of a free
loopback /16, as the kubelet gives them. Then it measures

1. regenerating the table: compiling the policies (Python), rendering the script, and
   `nft -f` replacing the table, the median of 5 runs each;
2. connection set-up: a client process in one user pod's cgroup opens `--connections`
   TCP connections to a server at another user pod's address (the same course: allowed by
   the last rule of each side) and reads one byte the server sends on accept — with no
   table (the kernel alone), with the table (egress and ingress judged), and to a Service's
   cluster IP (DNAT, then judged); and, for comparison, through the userspace proxy
   (sim.proxy) that serves where nftables cannot be had.

Prints a markdown table. Nothing is left behind: the table is deleted and the cgroups removed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from gpu_reclaim_sim.kubelet import cgroups  # noqa: E402
from gpu_reclaim_sim.network import netpol, nftables  # noqa: E402
from gpu_reclaim_sim.network.addresses import free_pod_cidr  # noqa: E402
from gpu_reclaim_sim.network.proxy import SERVICE_NAME_LABEL, SLICE, SVC, ServiceProxy  # noqa: E402

NON_PRIVATE = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                           "169.254.169.254/32"]}}
CLIENT = r'''
import os, socket, sys, time, json
with open(sys.argv[1] + "/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
host, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
times = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((host, port))
    s.recv(1)
    times.append(time.perf_counter() - t)
    s.close()
print(json.dumps(times))
'''


def policies(courses: int) -> list[dict]:
    def pol(name: str, spec: dict) -> dict:
        return {"metadata": {"namespace": "jhub", "name": name}, "spec": spec}

    users = {"matchLabels": {"component": "singleuser-server"}}
    hub, proxy = ({"podSelector": {"matchLabels": {"component": c}}} for c in ("hub", "proxy"))
    out = [
        pol("singleuser", {"podSelector": users, "policyTypes": ["Ingress", "Egress"],
                           "ingress": [{"ports": [{"port": "notebook-port"}], "from": [{"podSelector": {
                               "matchLabels": {"hub.jupyter.org/network-access-singleuser": "true"}}}]}],
                           "egress": [{"to": [hub], "ports": [{"port": 8081}]},
                                      {"to": [proxy], "ports": [{"port": 8000}]},
                                      {"to": [NON_PRIVATE]}]}),
        pol("hub", {"podSelector": {"matchLabels": {"component": "hub"}}, "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{"ports": [{"port": "http"}], "from": [
                        {"podSelector": {"matchLabels": {"hub.jupyter.org/network-access-hub": "true"}}}]}],
                    "egress": [{"to": [proxy], "ports": [{"port": 8001}]},
                               {"to": [{"podSelector": users}], "ports": [{"port": 8888}]},
                               {"to": [NON_PRIVATE]}, {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}),
        pol("proxy", {"podSelector": {"matchLabels": {"component": "proxy"}}, "policyTypes": ["Ingress", "Egress"],
                      "ingress": [{"ports": [{"port": "http"}]}],
                      "egress": [{"to": [hub], "ports": [{"port": 8081}]},
                                 {"to": [{"podSelector": users}], "ports": [{"port": 8888}]}]}),
    ]
    for k in range(courses):
        course = {"podSelector": {"matchLabels": {"course": f"c{k}"}}}
        ports = [{"port": 9000, "endPort": 9100}]
        out.append(pol(f"course-{k}", {**course, "policyTypes": ["Ingress", "Egress"],
                                       "ingress": [{"from": [course], "ports": ports}],
                                       "egress": [{"to": [course], "ports": ports}]}))
    return out


def build_pods(count: int, courses: int, network: ipaddress.IPv4Network) -> tuple[list[netpol.Pod], list[str]]:
    hosts = network.hosts()
    pods, uids = [], []
    for i in range(count):
        uid = f"bench-{uuid.uuid4()}"
        cgroups.pod_dir(uid).mkdir(parents=True)
        uids.append(uid)
        if i == 0:
            labels, ports = {"component": "hub", "hub.jupyter.org/network-access-singleuser": "true"}, {"http": 8081}
        elif i == 1:
            labels = {"component": "proxy", "hub.jupyter.org/network-access-hub": "true",
                      "hub.jupyter.org/network-access-singleuser": "true"}
            ports = {"http": 8000, "api": 8001}
        else:
            labels = {"component": "singleuser-server", "hub.jupyter.org/network-access-hub": "true",
                      "course": f"c{(i - 2) % courses}"}
            ports = {"notebook-port": 8888}
        pods.append(netpol.Pod(uid, "jhub", labels, str(next(hosts)), cgroups.nft_path(uid),
                               {(n, "TCP"): p for n, p in ports.items()}))
    return pods, uids


def routes(pods: list[netpol.Pod], services: int, network: ipaddress.IPv4Network) -> list[nftables.Route]:
    hosts = network.hosts()
    users = pods[2:]
    out = []
    for k in range(services):
        backends = tuple((p.ip, 9000) for p in users[k * 10 % len(users):][:10])
        out.append(nftables.Route(f"jhub/svc-{k}:http", ((str(next(hosts)), 80),), backends))
    return out


def median_time(fn, runs: int = 5) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def serve(ip: str, port: int) -> socket.socket:
    server = socket.create_server((ip, port), backlog=512)

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"x")
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return server


def connect_times(cgroup: Path | None, host: str, port: int, n: int) -> list[float]:
    if cgroup is None:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            with socket.create_connection((host, port)) as s:
                s.recv(1)
            times.append(time.perf_counter() - t)
        return times
    out = subprocess.run([sys.executable, "-c", CLIENT, str(cgroup), host, str(port), str(n)],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out)


class FixedObjects:
    """One Service and its EndpointSlice that never change, as the node agent's mirror of the
    API (sim.nodeagent.nodeservices.ApiMirror) offers them to the proxy."""

    def __init__(self, objects: dict[str, list[dict]]) -> None:
        self._objects = objects

    def objects(self, rtype: Any) -> list[dict]:
        return self._objects.get(rtype.plural, [])

    def find(self, rtype: Any, namespace: str | None, name: str) -> dict | None:
        return next((o for o in self.objects(rtype) if o["metadata"]["name"] == name), None)

    def subscribe(self, rtype: Any, callback: Any) -> Any:
        return lambda: None


def userspace_proxy(frontend: str, backend: tuple[str, int]) -> tuple[asyncio.AbstractEventLoop, Any]:
    """sim.proxy's forwarder for one Service, on a loop of its own."""
    service = {"metadata": {"name": "web", "namespace": "jhub"},
               "spec": {"clusterIP": frontend, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}
    endpoints = {"metadata": {"name": "web-x", "namespace": "jhub", "labels": {SERVICE_NAME_LABEL: "web"}},
                 "endpoints": [{"addresses": [backend[0]], "conditions": {"ready": True}}],
                 "ports": [{"name": "http", "port": backend[1], "protocol": "TCP"}]}
    loop = asyncio.new_event_loop()
    proxy = ServiceProxy(FixedObjects({SVC.plural: [service], SLICE.plural: [endpoints]}))
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(proxy.start(), loop).result(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((frontend, 80), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return loop, proxy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--courses", type=int, default=17, help="policies besides z2jh's three")
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--connections", type=int, default=2000)
    args = parser.parse_args()
    reason = "no writable cgroup2 mount, or not root" if not cgroups.available() else nftables.unavailable()
    if reason:
        sys.exit(f"netpol_cost: needs root, nftables and cgroup2 ({reason})")

    pod_net = ipaddress.ip_network(free_pod_cidr())
    svc_net = ipaddress.ip_network(free_pod_cidr({pod_net.network_address.packed[1]}))
    view = netpol.AddressView([pod_net, svc_net])
    table = nftables.table_name()
    pods, uids = build_pods(args.pods, args.courses, pod_net)
    svc_routes = routes(pods, args.services, svc_net)
    pols = policies(args.courses)
    namespaces = {"jhub": {"kubernetes.io/metadata.name": "jhub"}}
    results: dict[str, Any] = {}
    servers: list[socket.socket] = []
    try:
        client, server = pods[2], pods[2 + args.courses]  # the same course: the course rules allow it
        assert server.labels["course"] == client.labels["course"]
        # a port per measurement: no TIME_WAIT of one run meets the next's connections
        servers += [serve(server.ip, 9000), serve(server.ip, 9001), serve(server.ip, 9002)]
        client_cgroup = cgroups.mount_point() / cgroups.BASE / f"pod{client.uid}"
        direct = connect_times(client_cgroup, server.ip, 9000, args.connections)

        compile_s, compiled = median_time(lambda: netpol.compile_policies(pols, pods, namespaces, view))
        render_s, script = median_time(lambda: nftables.render(table, svc_routes + [nftables.Route(
            "jhub/bench:http", ((str(svc_net[-2]), 80),), ((server.ip, 9002),))], compiled))
        apply_s, _ = median_time(lambda: asyncio.run(nftables.apply(script)))
        time.sleep(2)  # let the kernel finish freeing the replaced tables before timing connections
        assert compiled.allows(client, server.ip, 9000) and not compiled.allows(client, pods[0].ip, 9000)
        policed = connect_times(client_cgroup, server.ip, 9001, args.connections)
        via_service = connect_times(client_cgroup, str(svc_net[-2]), 80, args.connections)
        refused = subprocess.run([sys.executable, "-c", CLIENT, str(client_cgroup), pods[3 + args.courses].ip,
                                  "9000", "1"], capture_output=True, text=True)
        assert "EHOSTUNREACH" in refused.stderr or "No route to host" in refused.stderr, refused.stderr
        nftables.delete(table)

        loop, proxy = userspace_proxy(str(svc_net[-3]), (server.ip, 9003))
        servers.append(serve(server.ip, 9003))
        userspace = connect_times(None, str(svc_net[-3]), 80, args.connections)
        asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)

        elements = sum(line.count(",") + 1 for line in script.splitlines() if "elements = {" in line) + \
            sum(1 for line in script.splitlines() if line.startswith("\t\t\t"))
        results = {
            "compile": compile_s, "render": render_s, "apply": apply_s, "script_kib": len(script) / 1024,
            "ingress_rules": len(compiled.ingress), "egress_rules": len(compiled.egress), "elements": elements,
            "direct": direct, "policed": policed, "via_service": via_service, "userspace": userspace,
        }
    finally:
        for s in servers:
            s.close()
        nftables.delete(table)
        for uid in uids:
            cgroups.remove(uid)
    print(report(args, results))


def _us(times: list[float], q: float) -> str:
    ordered = sorted(times)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6:.0f}"


def report(args: argparse.Namespace, r: dict[str, Any]) -> str:
    rows = [("kernel only (no table)", "direct"), ("pod → pod address, judged (egress + ingress)", "policed"),
            ("pod → cluster IP: DNAT, then judged", "via_service"),
            ("host → cluster IP through sim.proxy (userspace fallback)", "userspace")]
    lines = [
        f"- Machine: {os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}, "
        f"{subprocess.run([nftables.NFT, '--version'], capture_output=True, text=True).stdout.strip()}, "
        f"Python {platform.python_version()}.",
        f"- {args.pods} pods, {args.courses + 3} NetworkPolicies ({r['ingress_rules']} ingress and "
        f"{r['egress_rules']} egress rules after compiling), {args.services + 1} Services: a table of "
        f"{r['script_kib']:.0f} KiB, {r['elements']:,} set elements.",
        f"- Regenerating the table: compile {r['compile'] * 1e3:.0f} ms + render {r['render'] * 1e3:.0f} ms "
        f"+ `nft -f` {r['apply'] * 1e3:.0f} ms = **{(r['compile'] + r['render'] + r['apply']) * 1e3:.0f} ms** "
        "(median of 5).",
        "",
        f"| connection set-up ({args.connections} connections, connect + first byte) | p50 µs | p90 µs | p99 µs |",
        "|---|---:|---:|---:|",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {_us(r[key], 0.5)} | {_us(r[key], 0.9)} | {_us(r[key], 0.99)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
