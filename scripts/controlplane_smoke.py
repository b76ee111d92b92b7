"""Smoke check of the control plane that scripts/build-controlplane.sh builds.

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback with a
throw-away data directory, certificates and credentials, checks that each comes up (the API
server's /version and /readyz, the others' /healthz and leader-election Lease, the
controller-manager's first ServiceAccount) and that RBAC refuses what it should, prints each
one's start-up time and memory as JSON, and stops them by their PIDs; exits non-zero if a check
fails. Standard library and openssl only, so that it runs before `make setup`; a test later
(issue 37).

    python3 scripts/controlplane_smoke.py [--bin-dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
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
SETTLE_S = 10.0


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


def usage(pid: int) -> dict[str, object]:
    """The process's resident memory now and at its peak (VmRSS, VmHWM), the part of it that is its
    own (RssAnon: the four share the binary's pages), and its CPU time so far."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    utime, stime = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]
    return {"rss_mib": round(int(status["VmRSS"].split()[0]) / 1024),
            "peak_rss_mib": round(int(status["VmHWM"].split()[0]) / 1024),
            "anon_rss_mib": round(int(status["RssAnon"].split()[0]) / 1024),
            "cpu_s": round((int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK"), 1)}


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


def certificates(work: Path) -> tuple[Path, Path, Path]:
    """A cluster CA and the API server's serving certificate signed by it (cert, key), as kubeadm
    makes them: the controller-manager publishes the CA to pods (kube-root-ca.crt), which takes
    a CA certificate, and the API server publishes --client-ca-file for the other components."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=work)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=smoke-ca")
    names = "IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes.default.svc"
    openssl("req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver",
            "-addext", f"subjectAltName={names}")
    openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-days", "1",
            "-copy_extensions", "copyall", "-out", "apiserver.crt")
    return work / "ca.crt", work / "apiserver.crt", work / "apiserver.key"


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
    results["etcd"] = {"version": json.loads(get(f"http://127.0.0.1:{etcd_client}/version")[1])["etcdserver"],
                       "ready_s": round(etcd.ready_s, 2)}

    ca, serving_cert, serving_key = certificates(work)
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
        "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={serving_cert}", f"--tls-private-key-file={serving_key}", f"--client-ca-file={ca}",
        # the API server refuses loopback as its advertise address; TEST-NET-1 (RFC 5737), never
        # routed, and no reconciler writes it into the `kubernetes` Service's endpoints, so that
        # nothing is ever sent there (the node agent's increment gives it an address inside a
        # network namespace the run creates)
        "--advertise-address=192.0.2.1", "--endpoint-reconciler-type=none",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
        f"--token-auth-file={token_file}",
        f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
    ])
    started.append(apiserver)
    server = f"https://127.0.0.1:{port}"
    tls = ssl.create_default_context(cafile=str(ca))
    wait_until(apiserver, partial(ok, f"{server}/readyz", tls))
    # anonymous: system:public-info-viewer lets anyone read /version, and RBAC nothing more
    results["kube-apiserver"] = {
        "version": json.loads(get(f"{server}/version", tls)[1])["gitVersion"],
        "ready_s": round(apiserver.ready_s, 2),
        "anonymous_list_pods": get(f"{server}/api/v1/pods", tls)[0],
        "scheduler_list_secrets": get(f"{server}/api/v1/secrets", tls, tokens["kube-scheduler"])[0],
    }

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
        results[name] = {"healthz_s": round(healthy_s, 2), "leader_s": round(component.ready_s, 2),
                         "lease_holder": holder}

    # the controllers at work: the service-account controller gives each namespace its `default` one
    controllers = started[-1]
    default_sa = f"{server}/api/v1/namespaces/default/serviceaccounts/default"
    wait_until(controllers, partial(ok, default_sa, tls, tokens["admin"]))
    results["kube-controller-manager"]["default_serviceaccount_s"] = round(controllers.ready_s, 2)

    time.sleep(SETTLE_S)  # memory once the controllers' and the scheduler's informers have synced
    for component in started:
        results[component.name] |= usage(component.process.pid)
    return results


def verify(results: dict[str, dict[str, object]]) -> list[str]:
    """What differs from a working control plane of the version controlplane/go.mod pins."""
    want = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (ROOT / "controlplane" / "go.mod").read_text(), re.M)
    apiserver = results["kube-apiserver"]
    failures = []
    if want is None or apiserver["version"] != want[1]:
        failures.append(f"/version says {apiserver['version']}, controlplane/go.mod pins {want and want[1]}")
    for check in ("anonymous_list_pods", "scheduler_list_secrets"):
        if apiserver[check] != 403:
            failures.append(f"{check}: {apiserver[check]}, not 403 Forbidden: RBAC is not enforcing")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, help="the built binaries (default: build or find them with"
                        " scripts/build-controlplane.sh)")
    parser.add_argument("--keep", action="store_true", help="keep the components' logs and data (path on stderr)")
    args = parser.parse_args()
    bin_dir = args.bin_dir or Path(subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-controlplane.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout.strip())
    work = Path(tempfile.mkdtemp(prefix="controlplane-smoke-"))  # private (0700): it holds the tokens
    try:
        results = run(bin_dir, work)
    finally:
        if args.keep:
            print(f"logs in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work)
    json.dump(results, sys.stdout, indent=2)
    print()
    failures = verify(results)
    if failures:
        raise SystemExit("\n".join(failures))


if __name__ == "__main__":
    main()
