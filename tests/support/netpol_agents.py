"""The network policy tests' pods and probes on the simulated cluster.

Each pod runs AGENT: it serves its ports (answering `<pod>:<port>` to whoever connects)
and, told through a file in a hostPath volume (not the network, which the policies under
test govern), opens a TCP connection from inside the pod and writes what happened: `open
<answer>`, `refused` (nothing listens, or a Service without endpoints), `unreachable`
(refused by a NetworkPolicy: ICMP administratively prohibited) or `timeout` (dropped).
`probe` connects from the test process itself: from outside the cluster."""

from __future__ import annotations

import errno
import ipaddress
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable

import yaml
from kubernetes import client as k8s

from gpu_reclaim_sim.network import nftables

from .sim_cluster import kubectl, wait_for

NS = "np"
IMAGE = "python:3.11-slim"
POLL = 0.05  # s between looks: an agent answers within milliseconds

AGENT = r'''
import errno, os, socket, sys, threading, time
name, ports, inbox = sys.argv[1], [int(p) for p in sys.argv[2].split(",") if p], sys.argv[3]

def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        c.sendall(f"{name}:{port}\n".encode())
        c.close()

def probe(host, port, timeout):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        return "open " + s.recv(100).decode().strip()
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return {errno.ECONNREFUSED: "refused", errno.EHOSTUNREACH: "unreachable"}.get(e.errno, f"error {e}")
    finally:
        s.close()

os.makedirs(inbox, exist_ok=True)
if os.environ.get("BOOT_PROBE"):  # the very first thing the pod does
    host, port = os.environ["BOOT_PROBE"].split()
    with open(os.path.join(inbox, "boot"), "w") as f:
        f.write(probe(host, int(port), 2.0))
for port in ports:
    threading.Thread(target=serve, args=(port,), daemon=True).start()
open(os.path.join(inbox, "ready"), "w").close()
while True:
    for entry in os.listdir(inbox):
        if entry.endswith(".req"):
            path = os.path.join(inbox, entry)
            host, port, timeout = open(path).read().split()
            result = probe(host, int(port), float(timeout))
            with open(path[:-4] + ".tmp", "w") as f:
                f.write(result)
            os.rename(path[:-4] + ".tmp", path[:-4] + ".res")
            os.unlink(path)
    time.sleep(0.01)
'''


class Agents:
    """The test's pods, each running AGENT."""

    def __init__(self, sim, core: k8s.CoreV1Api) -> None:
        self.sim, self.core, self.control = sim, core, sim.info["control_dir"]
        self.ips: dict[tuple[str, str], str] = {}

    def start(self, name: str, labels: dict[str, str] | None = None, ports: dict[str, int] | list[int] = (),
              ns: str = NS, boot_probe: str = "") -> str:
        named = ports.items() if isinstance(ports, dict) else [(None, p) for p in ports]
        container = {
            "name": "agent", "image": IMAGE,
            "command": ["python", "-c", AGENT, name, ",".join(str(p) for _, p in named), f"/control/{ns}.{name}"],
            "ports": [{"containerPort": p, **({"name": n} if n else {})} for n, p in named],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "BOOT_PROBE", "value": boot_probe}],
            "volumeMounts": [{"name": "control", "mountPath": "/control"}],
        }
        self.core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": labels or {}}, "spec": {
            "containers": [container], "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "control", "hostPath": {"path": str(self.control), "type": "Directory"}}]}})
        return self.wait(name, ns)

    def ensure(self, name: str, labels: dict[str, str] | None = None, ports: dict[str, int] | list[int] = (),
               ns: str = NS) -> str:
        """The pod's address, starting it unless an earlier test did."""
        return self.ips.get((ns, name)) or self.start(name, labels, ports, ns)

    def wait(self, name: str, ns: str = NS) -> str:
        wait_for((self.control / f"{ns}.{name}" / "ready").exists, f"agent {ns}/{name}", timeout=60, every=POLL)
        self.ips[(ns, name)] = wait_for(lambda: self.core.read_namespaced_pod(name, ns).status.pod_ip, "pod IP",
                                         timeout=20, every=POLL)
        return self.ips[(ns, name)]

    def probe(self, name: str, host: str, port: int, ns: str = NS, timeout: float = 2.0) -> str:
        """A connection from inside the pod."""
        inbox = self.control / f"{ns}.{name}"
        request = inbox / f"{uuid.uuid4().hex}.req"
        tmp = request.with_suffix(".new")
        tmp.write_text(f"{host} {port} {timeout}")
        tmp.rename(request)
        result = request.with_suffix(".res")
        wait_for(result.exists, f"answer of agent {name}", timeout=timeout + 10, every=POLL)
        return result.read_text()


def probe(host: str, port: int, timeout: float = 2.0) -> str:
    """A connection from the test process: from outside the cluster, at 127.0.0.1 (in the run's
    network namespace, where the cluster's networks are local, the kernel would otherwise
    give it the address it connects to as its source)."""
    with socket.socket() as s:
        s.settimeout(timeout)
        try:
            s.bind(("127.0.0.1", 0))
            s.connect((host, port))
            return "open " + s.recv(100).decode().strip()
        except socket.timeout:
            return "timeout"
        except OSError as e:
            return {errno.ECONNREFUSED: "refused", errno.EHOSTUNREACH: "unreachable"}.get(e.errno, f"error {e}")


def becomes(check: Callable[[], str], expected: str, what: str) -> None:
    """A NetworkPolicy takes effect eventually (the docs' words), here within moments."""
    last = [""]

    def done() -> bool:
        last[0] = check()
        return last[0] == expected

    try:
        wait_for(done, what, timeout=10, every=POLL)
    except AssertionError:
        raise AssertionError(f"{what}: {last[0]!r}, not {expected!r}") from None


def policy(name: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name}, "spec": spec}


def service(name: str, selector: dict, ports: list[dict], **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": selector, "ports": ports, **spec}}


def apply(sim, *docs: dict, ns: str = NS) -> None:
    kubectl(sim, "-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def cleanup(sim, ns: str = NS) -> None:
    kubectl(sim, "-n", ns, "delete", "networkpolicy", "--all")


def answer(server: socket.socket, name: str) -> None:
    """Answer every connection with `name`, as the agents do, until closed."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(f"{name}\n".encode())


def listening_addresses() -> set[str]:
    """The IPv4 addresses a process of this host listens on (TCP)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN; the address little-endian hex
            out.add(str(ipaddress.IPv4Address(bytes.fromhex(local.split(":")[0])[::-1])))
    return out


def nft_tables() -> list[str]:
    """The names of the host's nftables tables (every simulator's data plane has its own)."""
    out = subprocess.run([nftables.NFT, "list", "tables"], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines()]
