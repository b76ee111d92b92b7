"""The z2jh release on the simulated cluster (gpu_reclaim_sim.z2jh.release): one cluster
serves the module, and each release is installed afresh in namespace jhub
(helm-values/postgresql.yaml names it), one after another.

The hub image runs from the tests' hub environment (tests/support/live.py): this Python's
(JupyterHub 6), or --hub-python's: `make test` runs the module again with .venv-jh5, the
chart's own hub requirements (JupyterHub 5.5, KubeSpawner 7.1). The user image runs from
this Python's environment, as the other tests' single-user servers do."""

from __future__ import annotations

import pwd

import pytest

from gpu_reclaim_sim.z2jh import release as z2jh

from ..support import live
from ..support.release import POSTGRES_BIN, POSTGRES_IMAGE, sim_values


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
    sim = z2jh.start_cluster(tmp_path_factory.mktemp("release"), docs, hub_python=live.HUB_PYTHON,
                             extra_images=[_postgres_image()] if POSTGRES_BIN.is_dir() else [],
                             overrides={"bandwidth": "10GB/s", "gpu": {"collectionInterval": "1s"}})
    yield sim
    sim.stop()


