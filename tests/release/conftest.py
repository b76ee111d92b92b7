"""The z2jh release on the simulated cluster (gpu_reclaim_sim.z2jh): one cluster
serves the module, and each release is installed afresh in namespace jhub
(helm-values/postgresql.yaml names it), one after another.

The hub image runs from the tests' hub environment (tests/conftest.py): this Python's
(JupyterHub 6), or --hub-python's: `make test` runs the module again with .venv-jh5, the
chart's own hub requirements (JupyterHub 5.5, KubeSpawner 7.1). The user image runs from
this Python's environment, as the other tests' single-user servers do."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from gpu_reclaim_sim import z2jh

from .. import conftest

PASSWORD = "release-password"
USERS, ADMINS = ["alice", "bob", "carol"], ["admin"]
POSTGRES_IMAGE = "docker.io/library/postgres:15"  # Debian's PostgreSQL 15 stands in for it
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


def _postgres_image() -> dict:
    user = pwd.getpwnam("postgres")  # Debian's postgresql package's user
    return {"name": POSTGRES_IMAGE, "size": "150MB", "workingDir": "/",
            "user": {"name": "postgres", "uid": user.pw_uid, "gid": user.pw_gid},
            "env": {"PATH": f"{POSTGRES_BIN}:/usr/bin:/bin", "HOME": "/var/lib/postgresql"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The simulated cluster the releases go on (the demo's nodes, the release's images run
    from this machine's environments), with the simulated dcgm-exporter as a Service."""
    if reason := z2jh.unavailable():
        pytest.skip(reason)
    docs = z2jh.render(z2jh.BASE, extra=sim_values())
    sim = z2jh.start_cluster(tmp_path_factory.mktemp("release"), docs, hub_python=conftest.HUB_PYTHON,
                             extra_images=[_postgres_image()] if POSTGRES_BIN.is_dir() else [],
                             overrides={"bandwidth": "10GB/s", "gpu": {"collectionInterval": "1s"}})
    yield sim
    sim.stop()


def sim_values(**options) -> dict:
    values = z2jh.sim_values(password=PASSWORD, users=USERS, admins=ADMINS, options=options)
    # the hub and user images with the package: the worktree's (an editable install's own
    # path lookup may not reach a pod)
    values["hub"]["extraEnv"] = {"PYTHONPATH": str(conftest.REPO)}
    values["singleuser"]["extraEnv"] = conftest.lab_paths()
    return values
