"""The real simulator (`jupyterhub-gpu-reclaim-sim run`, process mode) as tests/sim's
modules start it: a module's own cluster from its scenario, the official client and
kubectl on it, and waiting for what it does."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gpu_reclaim_sim.cluster import NAMESPACE_GONE_S, STOP_S
from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.launch import Child, start_sim

KUBECTL = Path(sys.executable).parent / "kubectl"
NOTEBOOK_IMAGE = "quay.io/jupyter/base-notebook:2025-06-02"  # pre-pulled: no pull waits
# how long a run on the worker's control plane may take to start: it may first wait for an
# earlier run's namespace to be emptied (up to NAMESPACE_GONE_S), e.g. of pods whose node went
SHARED_START_S = NAMESPACE_GONE_S + 60


def notebook_scenario(name: str, ns: str) -> dict[str, Any]:
    """One CPU node that holds the notebook image, whose containers run as jovyan in its home
    (as the image's own user and environment would have them)."""
    return {
        "name": name, "namespaces": [ns], "mode": "process",
        "imageDefaults": {"user": {"name": "jovyan", "uid": 1000, "gid": 100},
                          "env": {"HOME": "/home/jovyan", "NB_USER": "jovyan"}, "workingDir": "/home/jovyan"},
        "nodeGroups": [{"name": "cpu", "count": 1, "cpu": "32", "memory": "64Gi", "images": [NOTEBOOK_IMAGE]}],
    }


@contextmanager
def sim_running(workdir: Path, scenario: dict[str, Any], plane: ControlPlane) -> Iterator[Child]:
    """The simulator running `scenario` in `workdir` on the worker's control plane, stopped at
    the end (its nodes and namespaces with it)."""
    (workdir / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    child = start_sim(workdir, workdir / "scenario.yaml", SHARED_START_S, ["--control-plane", str(plane.work)])
    try:
        yield child
    finally:
        child.stop(grace=STOP_S)  # it empties its namespaces first


def sim_fixtures(scenario: dict[str, Any]):
    """A module's `sim` and `core` fixtures (`sim, core = sim_fixtures(SCENARIO)`): the
    simulator running `scenario`, stopped after the module, and the official client's core
    API on it."""

    @pytest.fixture(scope="module")
    def sim(control_plane, tmp_path_factory):
        with sim_running(tmp_path_factory.mktemp(scenario["name"]), scenario, control_plane) as child:
            yield child

    @pytest.fixture(scope="module")
    def core(sim) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(k8s_config.new_client_from_config(sim.info["kubeconfig"]))

    return sim, core


def kubectl_with(kubeconfig: str | Path, *args: str, stdin: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
    """kubectl as `kubeconfig` has it (text in and out); with `check`, a failure is the test's."""
    proc = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
    return proc


def kubectl(sim, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """kubectl on `sim`, as its admin."""
    return kubectl_with(sim.info["kubeconfig"], *args, stdin=stdin, check=check)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.2) -> Any:
    """`check()`'s first truthy value, asked `every` s; fails saying `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"no {what} after {timeout:.0f} s")


def home(sim, user: str) -> Path:
    """The host directory of the user's home volume (the simulator's PVs are hostPath)."""
    volume = kubectl(sim, "get", "pvc", "-n", "jhub", f"claim-{user}", "-o", "jsonpath={.spec.volumeName}").stdout
    return Path(kubectl(sim, "get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout)
