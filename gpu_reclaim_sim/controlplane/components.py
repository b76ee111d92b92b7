"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager of one run, as kwok runs
them: the binaries `scripts/build-controlplane.sh` builds from controlplane/'s Go module,
each a local process listening on loopback, with the run's own CA (`credentials`), stopped
by their PIDs.

The API server authorizes with Node and RBAC and admits with NodeRestriction, so the node
agent is held to its own node and the hub and the service get exactly what their Roles
grant. It refuses a loopback advertise address: inside the run's network namespace
(sim.network.namespace) it listens on every address there and advertises 10.0.0.1, which
its endpoint reconciler writes into the `kubernetes` Service as a real cluster's does;
outside one (no root) it listens on 127.0.0.1 and advertises TEST-NET-1 (192.0.2.1, RFC
5737), never routed, with no reconciler to write it anywhere. etcd keeps its data in the run's directory without
fsync (a test cluster: nothing survives the run). The scheduler and the controller-manager
run alone, without leader election.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..kubelet.sandbox import PR_SET_PDEATHSIG, _prctl
from ..network import namespace
from ..paths import REPO
from .credentials import Authority, Issued

READY_TIMEOUT_S = 120.0
ADMIN = "admin"  # the admin's certificate's file name in the CA's folder
NOWHERE = "192.0.2.1"  # the advertise address outside the run's network namespace
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
# what the API server's audit log records: every request of a pod's ServiceAccount (the hub's,
# the service's), with its answer's code, so a test can read what was refused; nothing else
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}]}


class ControlPlaneError(RuntimeError):
    """A component that exited or did not become ready; the message ends with its log."""


def binaries() -> Path:
    """The folder of the built binaries: scripts/build-controlplane.sh finds them in its cache
    (a fraction of a second) or builds them (minutes, once)."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "build-controlplane.sh")], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return Path(done.stdout.strip())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started_at: float
    ready_s: float = 0.0

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def usage(self) -> dict[str, float]:
        """Resident memory now and at its peak, the part of it that is its own (RssAnon: the
        four share the binary's pages), and CPU time so far."""
        status = dict(line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        utime, stime = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]
        return {"rss_mib": round(int(status["VmRSS"].split()[0]) / 1024),
                "peak_rss_mib": round(int(status["VmHWM"].split()[0]) / 1024),
                "anon_rss_mib": round(int(status["RssAnon"].split()[0]) / 1024),
                "cpu_s": round((int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK"), 1)}


@dataclass
class ControlPlane:
    """The control plane of one run, in `work` (0700: it holds the keys). `start` blocks
    until each component is ready (from async code: `asyncio.to_thread`). `running(work)` is
    one another process started there (a test worker's, shared by the clusters its modules
    run one after another): its CA, admin and address; stopping it stops nothing."""
    work: Path
    bin_dir: Path = field(default_factory=binaries)
    port: int = 0  # the API server's (0: a free one)
    started_elsewhere: bool = False
    authority: Authority = field(init=False)
    server: str = ""
    admin: Issued = field(init=False)  # the admin's client certificate (system:masters)
    admin_kubeconfig: Path = field(init=False)
    audit_log: Path = field(init=False)  # JSON lines (AUDIT_POLICY)
    components: list[Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.admin_kubeconfig = self.work / "admin.kubeconfig"
        self.audit_log = self.work / "audit.log"
        if self.started_elsewhere:
            self.authority = Authority(self.work / "pki")
            self.admin = Issued(self.authority.directory / f"{ADMIN}.crt", self.authority.directory / f"{ADMIN}.key")
            self.server = yaml.safe_load(self.admin_kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
            return
        self.work.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.authority = Authority.create(self.work / "pki")

    @classmethod
    def running(cls, work: Path) -> "ControlPlane":
        if not (work / "admin.kubeconfig").is_file():
            raise ControlPlaneError(f"no control plane in {work}: its admin.kubeconfig is missing")
        return cls(work, started_elsewhere=True)

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.authority.cert))

    def start(self) -> "ControlPlane":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        pki = self.authority
        client, peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._run("etcd", [
            "--name=run", f"--data-dir={self.work / 'etcd'}", "--unsafe-no-fsync",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=run=http://127.0.0.1:{peer}", "--log-level=warn",
        ])
        self._wait(etcd, f"{etcd_url}/health")

        serving = pki.issue("apiserver", "kube-apiserver", server_names=(
            "127.0.0.1", "localhost", namespace.API_SERVER_ADDRESS, str(namespace.SERVICES.network_address + 1),
            "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"))
        to_kubelets = pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
        sa_key, sa_public = pki.signing_key()
        port = self.port or free_port()
        self.server = f"https://127.0.0.1:{port}"
        addresses = ["--bind-address=0.0.0.0", f"--advertise-address={namespace.API_SERVER_ADDRESS}"] \
            if namespace.inside() else ["--bind-address=127.0.0.1", f"--advertise-address={NOWHERE}",
                                        "--endpoint-reconciler-type=none"]
        apiserver = self._run("kube-apiserver", [
            f"--etcd-servers={etcd_url}", *addresses, f"--secure-port={port}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.cert}",
            f"--service-cluster-ip-range={namespace.SERVICES}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--kubelet-client-certificate={to_kubelets.cert}", f"--kubelet-client-key={to_kubelets.key}",
            f"--kubelet-certificate-authority={pki.cert}", "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={sa_public}", f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc", "--profiling=false",
            f"--audit-policy-file={self._write('audit-policy.json', AUDIT_POLICY)}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json", "--audit-log-mode=blocking",
            "--audit-log-maxsize=100", "--audit-log-maxbackup=1",  # MB: a demo may run for days
        ])
        self.admin = pki.issue(ADMIN, "admin", ("system:masters",))
        pki.kubeconfig(self.admin_kubeconfig, self.server, "admin", client=self.admin)
        self._wait(apiserver, f"{self.server}/readyz", self.tls(), self._admin_tls())

        for name, extra in (("kube-scheduler", []), ("kube-controller-manager", [
                f"--service-account-private-key-file={sa_key}", f"--root-ca-file={pki.cert}",
                "--use-service-account-credentials", f"--cluster-signing-cert-file={pki.cert}",
                f"--cluster-signing-key-file={pki.key}"])):
            user = f"system:{name}"
            config = pki.kubeconfig(self.work / f"{name}.kubeconfig", self.server, user, client=pki.issue(name, user))
            health = free_port()
            component = self._run(name, [
                f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}", "--leader-elect=false",
                "--bind-address=127.0.0.1", f"--secure-port={health}", f"--cert-dir={self.work / name}", *extra])
            self._wait(component, f"https://127.0.0.1:{health}/healthz", ssl._create_unverified_context())

    def _write(self, name: str, content: dict) -> Path:
        path = self.work / name
        path.write_text(json.dumps(content))
        return path

    def _admin_tls(self) -> ssl.SSLContext:
        context = self.tls()
        context.load_cert_chain(self.admin.cert, self.admin.key)
        return context

    def _run(self, name: str, args: list[str]) -> Component:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([str(self.bin_dir / name), *args], stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=self.work, preexec_fn=_die_with_the_run)
        component = Component(name, process, log, time.monotonic())
        self.components.append(component)
        return component

    def _wait(self, component: Component, url: str, *contexts: ssl.SSLContext) -> None:
        """Until `url` answers 200 (with the first context that gets an answer)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if component.process.poll() is not None:
                raise ControlPlaneError(f"{component.name} exited ({component.process.returncode}):\n"
                                        f"{component.tail()}")
            if any(_answers(url, c) for c in contexts or (None,)):
                component.ready_s = time.monotonic() - component.started_at
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{component.name} not ready after {READY_TIMEOUT_S:.0f} s:\n{component.tail()}")

    def get(self, path: str) -> tuple[int, dict]:
        """GET `path` of the API server as the admin: (status, JSON body)."""
        try:
            with urllib.request.urlopen(self.server + path, timeout=10, context=self._admin_tls()) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def version(self) -> str:
        return str(self.get("/version")[1]["gitVersion"])

    def stop(self) -> None:
        """Each by its PID, the API server's clients first."""
        for component in reversed(self.components):
            component.process.terminate()
            try:
                component.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                component.process.kill()
                component.process.wait()
        self.components.clear()


def _die_with_the_run() -> None:
    """In the component's process before it runs: SIGKILL when the thread that started it ends,
    so that a run killed (no chance to stop anything) leaves no control plane behind. Not
    SIGTERM: a kube-apiserver whose etcd ended with it waited in its graceful shutdown for good
    (two of an interrupted test session's five were still running 40 minutes later)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _answers(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return r.status == 200
    except (OSError, ssl.SSLError):  # HTTPError is an OSError: not ready yet
        return False
