"""Starting the simulated cluster and a JupyterHub as child processes.

The demo and the test harness both use this, so what the tests check is what a new user
runs. Each child is stopped by its PID (SIGTERM, then SIGKILL after a grace period); as root,
each runs in a cgroup of its own, and what it leaves behind is ended with it: a hub that
exits early leaves its proxy and managed services running otherwise (each in a session of
its own, reparented to init, the service cycling against a hub that is gone).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kubelet import cgroups
from .paths import DEFAULT_SCENARIO


def _ephemeral_ports() -> range:
    """The ports the kernel hands out to outgoing connections (ip_local_port_range)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on `host` for a child to listen on, outside the ephemeral range: a port
    the kernel picked there (bind to 0) can be taken by any process's outgoing connection
    before the child binds it ("Address already in use" with several test workers); below
    30000, Kubernetes' NodePort range."""
    ephemeral = _ephemeral_ports()
    candidates = [p for p in range(10000, 30000) if p not in ephemeral] or list(range(1024, ephemeral.start))
    for port in random.sample(candidates, min(200, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every candidate taken: the kernel's pick
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Child:
    """A child process with its log file."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    info: dict[str, Any] = field(default_factory=dict)
    cgroup: Path | None = None  # where it and everything it starts run (as root)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM, SIGKILL after `grace` s; then whatever it left in its cgroup, killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.cgroup is not None:
            cgroups.end(self.cgroup, time.monotonic() + 5)
        return self.proc.returncode


def spawn(name: str, cmd: list[str], log_path: Path, env: dict[str, str], cwd: Path) -> Child:
    """`cmd` started as a Child writing to `log_path` (as root, in a cgroup of its own)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    group = cgroups.launched_dir(name) if cgroups.available() else None
    if group is not None:
        group.mkdir(parents=True)
        # it enters the cgroup itself, then execs `cmd` (the same PID): nothing it starts can
        # begin outside it, as could happen if this process moved it after its start
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *cmd]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    return Child(name, proc, log_path, cgroup=group)


def _wait(child: Child, ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            child.stop()  # what it started meanwhile
            raise RuntimeError(f"{child.name} exited ({child.proc.returncode}) before {what}:\n{child.log_tail()}")
        if ready():
            return
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"{child.name}: no {what} after {timeout:.0f} s:\n{child.log_tail()}")


def start_sim(workdir: Path, scenario: Path | None = None, timeout: float = 60.0,
              extra_args: list[str] | None = None) -> Child:
    """Run `jupyterhub-gpu-reclaim-sim run` (sim.cluster: the real control plane and the node
    agent) and wait until it has written its addresses."""
    workdir.mkdir(parents=True, exist_ok=True)
    info_file = workdir / "sim.json"
    info_file.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "gpu_reclaim_sim", "run",
        "--config", str(scenario or DEFAULT_SCENARIO),
        "--kubeconfig", str(workdir / "kubeconfig"),
        "--data-dir", str(workdir / "cluster"),
        "--info-file", str(info_file),
        *(extra_args or []),
    ]
    child = spawn("sim", cmd, workdir / "sim.log", dict(os.environ), workdir)
    _wait(child, info_file.exists, timeout, "cluster info")
    child.info = json.loads(info_file.read_text())
    return child


def start_hub(workdir: Path, config: Path, kubeconfig: str, *, port: int = 8000,
              env: dict[str, str] | None = None, timeout: float = 90.0,
              python: str | Path | None = None) -> Child:
    """Run `jupyterhub -f config` against the simulated cluster and wait for /hub/health.

    `python`: the Python of the environment the hub runs from (its `jupyterhub` beside it;
    default: this one), e.g. a virtualenv with the z2jh hub image's JupyterHub 5. Services
    the config starts with `sys.executable` run from there too, as in the hub's image.
    `info["version"]` is the version the hub's API reports."""
    workdir.mkdir(parents=True, exist_ok=True)
    hub_env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "GPU_RECLAIM_HUB_PORT": str(port),
        "GPU_RECLAIM_HUB_API_PORT": str(free_port()),
        "GPU_RECLAIM_PROXY_API_PORT": str(free_port()),
        **(env or {}),
    }
    jupyterhub = str(Path(python or sys.executable).with_name("jupyterhub"))
    child = spawn("jupyterhub", [jupyterhub, "-f", str(config)], workdir / "jupyterhub.log", hub_env, workdir)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    _wait(child, healthy, timeout, "answer on /hub/health")
    with urllib.request.urlopen(f"{url}/hub/api/", timeout=10) as r:
        version = json.load(r)["version"]
    child.info = {"url": url, "hub_api_port": hub_env["GPU_RECLAIM_HUB_API_PORT"], "version": version}
    return child
