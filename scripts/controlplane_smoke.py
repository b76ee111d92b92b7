"""Smoke check of the control plane that scripts/build-controlplane.sh builds.

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback with a
throw-away data directory, certificates and credentials, checks that each comes up (the API
server's /version and /readyz, the others' /healthz and leader-election Lease), prints each
one's start-up time and memory, and stops them by their PIDs. Standard library only, so that
it runs before `make setup`; a test later (issue 37).

    python3 scripts/controlplane_smoke.py [--bin-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 120.0


@dataclass
class Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started_at: float
    ready_s: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    return get(url, context, token)[0] == 200


def rss_mib(pid: int) -> tuple[float, float]:
    """The process's resident memory now and at its peak (VmRSS, VmHWM), in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def wait_until(started: Started, check: Callable[[], bool]) -> None:
    """Waits for check() to hold, failing with the component's log if it exits or times out;
    ready_s: the time from the component's start."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if started.process.poll() is not None:
            raise SystemExit(f"{started.name} exited ({started.process.returncode}):\n{tail(started.log)}")
        try:
            if check():
                started.ready_s = time.monotonic() - started.started_at
                return
        except (OSError, ssl.SSLError):
            pass  # not listening yet
        time.sleep(0.1)
    raise SystemExit(f"{started.name} not ready after {READY_TIMEOUT_S:.0f} s:\n{tail(started.log)}")


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def start(bin_dir: Path, work: Path, name: str, args: list[str]) -> Started:
    log = work / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(bin_dir / name), *args], stdout=out, stderr=subprocess.STDOUT, cwd=work)
    return Started(name, process, log, time.monotonic())


def kubeconfig(path: Path, server: str, ca: Path, token: str) -> Path:
    # JSON is YAML: the components read it as a kubeconfig
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "smoke",
        "clusters": [{"name": "smoke", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "smoke", "user": {"token": token}}],
        "contexts": [{"name": "smoke", "context": {"cluster": "smoke", "user": "smoke"}}],
    }))
    path.chmod(0o600)
    return path


def run(bin_dir: Path, work: Path) -> dict[str, dict[str, object]]:
    started: list[Started] = []
    try:
        return check(bin_dir, work, started)
    finally:
        for component in reversed(started):  # by PID, the API server's clients first
            component.process.terminate()
            try:
                component.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                component.process.kill()
                component.process.wait()


def check(bin_dir: Path, work: Path, started: list[Started]) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}

    def measured(component: Started, **extra: object) -> None:
        rss, peak = rss_mib(component.process.pid)
        results[component.name] = {"ready_s": round(component.ready_s, 2), "rss_mib": round(rss),
                                   "peak_rss_mib": round(peak), **extra}

    etcd_client, etcd_peer = free_port(), free_port()
    etcd = start(bin_dir, work, "etcd", [
        "--name=smoke", f"--data-dir={work / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
        f"--initial-cluster=smoke=http://127.0.0.1:{etcd_peer}",
    ])
    started.append(etcd)
    wait_until(etcd, partial(ok, f"http://127.0.0.1:{etcd_client}/health"))
    measured(etcd, version=json.loads(get(f"http://127.0.0.1:{etcd_client}/version")[1])["etcdserver"])

    sa_key = work / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
    tokens = {name: secrets.token_hex(16) for name in ("admin", "kube-scheduler", "kube-controller-manager")}
    token_file = work / "tokens.csv"
    token_file.write_text(
        f'{tokens["admin"]},smoke-admin,smoke-admin,"system:masters"\n'
        f'{tokens["kube-scheduler"]},system:kube-scheduler,system:kube-scheduler\n'
        f'{tokens["kube-controller-manager"]},system:kube-controller-manager,system:kube-controller-manager\n'
    )
    token_file.chmod(0o600)
    port = free_port()
    apiserver = start(bin_dir, work, "kube-apiserver", [
        f"--etcd-servers=http://127.0.0.1:{etcd_client}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={work / 'pki'}",
        # the address the `kubernetes` Service's endpoints name (the API server refuses loopback
        # there); nothing connects to it here: TEST-NET-1 (RFC 5737), never routed
        "--advertise-address=192.0.2.1",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
        f"--token-auth-file={token_file}",
        f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
    ])
    started.append(apiserver)
    ca = work / "pki" / "apiserver.crt"  # self-signed by the API server (--cert-dir) as it starts
    server = f"https://127.0.0.1:{port}"
    wait_until(apiserver, lambda: ok(f"{server}/readyz", ssl.create_default_context(cafile=str(ca))))
    tls = ssl.create_default_context(cafile=str(ca))
    version = json.loads(get(f"{server}/version", tls)[1])  # anonymous, as system:public-info-viewer allows
    measured(apiserver, version=version["gitVersion"])

    for name in ("kube-scheduler", "kube-controller-manager"):
        config = kubeconfig(work / f"{name}.kubeconfig", server, ca, tokens[name])
        health_port = free_port()
        extra = [] if name == "kube-scheduler" else [
            f"--service-account-private-key-file={sa_key}", f"--root-ca-file={ca}",
            "--use-service-account-credentials",
        ]
        component = start(bin_dir, work, name, [
            f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}", "--bind-address=127.0.0.1",
            f"--secure-port={health_port}", f"--cert-dir={work / name}", *extra,
        ])
        started.append(component)
        lease = f"{server}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}"  # its leader election
        health = f"https://127.0.0.1:{health_port}/healthz"
        wait_until(component, partial(ok, health, ssl._create_unverified_context()))  # a self-signed certificate
        healthy_s = component.ready_s
        wait_until(component, partial(ok, lease, tls, tokens["admin"]))
        holder = json.loads(get(lease, tls, tokens["admin"])[1])["spec"]["holderIdentity"]
        measured(component, healthz_s=round(healthy_s, 2), lease_holder=holder)
    results["kube-apiserver"]["rss_mib_with_clients"] = round(rss_mib(apiserver.process.pid)[0])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, help="the built binaries (default: build or find them with"
                        " scripts/build-controlplane.sh)")
    args = parser.parse_args()
    bin_dir = args.bin_dir or Path(subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-controlplane.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="controlplane-smoke-") as work:
        os.chmod(work, 0o700)
        results = run(bin_dir, Path(work))
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
