"""The z2jh release on the simulated cluster (jupyterhub_gpu_reclaim.z2jh_release): one
cluster per hub environment serves the module, and each release is installed afresh in
namespace jhub (helm-values/postgresql.yaml names it), one after another.

The hub environment is a parameter: the Python whose JupyterHub, KubeSpawner and package
the hub image and the user image run (HUB_ENVIRONMENTS)."""

from __future__ import annotations

import pwd
import secrets
import sys
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu_reclaim import z2jh_release
from jupyterhub_gpu_reclaim.launch import REPO, start_sim
from jupyterhub_gpu_reclaim.sim import cgroups, nftables

#: the hub environments the release runs with (a Python whose JupyterHub, KubeSpawner and
#: jupyterhub-gpu-reclaim stand in for the hub image's); a missing one is skipped, named
HUB_ENVIRONMENTS = [
    pytest.param(Path(sys.executable), id="jupyterhub6"),
    # the chart's own hub requirements (JupyterHub 5.5, KubeSpawner 7.1), scripts/setup.sh:
    # pytest.param(REPO / ".venv-jh5" / "bin" / "python", id="jupyterhub5"),
]
PASSWORD = "release-password"
USERS, ADMINS = ["alice", "bob", "carol"], ["admin"]
POSTGRES_IMAGE = "docker.io/library/postgres:15"  # Debian's PostgreSQL 15 stands in for it
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


def _unavailable(python: Path) -> str | None:
    if not python.exists():
        return f"no hub environment at {python}"
    if reason := z2jh_release.missing():
        return reason
    if not cgroups.available() or nftables.unavailable():
        return ("the release's NetworkPolicies need the simulator's data plane: root, nftables and a "
                f"cgroup2 mount ({nftables.unavailable() or 'no writable cgroup2 mount, or not root'})")
    return None


def _postgres_image() -> dict:
    user = pwd.getpwnam("postgres")  # Debian's postgresql package's user
    return {"name": POSTGRES_IMAGE, "size": "150MB", "workingDir": "/",
            "user": {"name": "postgres", "uid": user.pw_uid, "gid": user.pw_gid},
            "env": {"PATH": f"{POSTGRES_BIN}:/usr/bin:/bin", "HOME": "/var/lib/postgresql"}}


@pytest.fixture(scope="module", params=HUB_ENVIRONMENTS)
def cluster(request, tmp_path_factory):
    """The simulated cluster the releases go on (the demo's nodes, the release's images run
    from the hub environment), with the simulated dcgm-exporter as a Service."""
    python: Path = request.param
    if reason := _unavailable(python):
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("release")
    docs = z2jh_release.render(z2jh_release.BASE, extra=sim_values())
    images = [_postgres_image()] if POSTGRES_BIN.is_dir() else []
    scenario = z2jh_release.scenario(docs, python=python, extra_images=images,
                                     overrides={"bandwidth": "10GB/s", "gpu": {"collectionInterval": "1s"}})
    (workdir / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    sim = start_sim(workdir, workdir / "scenario.yaml")
    sim.info["python"] = python
    try:
        z2jh_release.apply(sim.info["kubeconfig"], z2jh_release.dcgm_exporter(sim.info["metrics"]))
        yield sim
    finally:
        sim.stop()


def sim_values(**options) -> dict:
    return z2jh_release.sim_values(password=PASSWORD, users=USERS, admins=ADMINS, options=options)


def new_secret() -> str:
    return secrets.token_hex(12)
