"""The z2jh release on the simulated cluster (gpu_reclaim_sim.z2jh.release): one cluster
serves the module, and each release is installed afresh in namespace jhub
(helm-values/postgresql.yaml names it), one after another; the base release once.

The hub image runs from the tests' hub environment (tests/support/live.py): this Python's
(JupyterHub 6), or --hub-python's: `make test` runs the module again with .venv-jh5, the
chart's own hub requirements (JupyterHub 5.5, KubeSpawner 7.1). The user image runs from
this Python's environment, as the other tests' single-user servers do."""

from __future__ import annotations

import pytest
import pytest_asyncio

from gpu_reclaim_sim.z2jh import release as z2jh

from ..support import live
from ..support.postgres import POSTGRES_BIN
from ..support.release import RECLAIM_ADMINS, TIMINGS, hub_variants, install, settings, sim_values
from ..support.release_client import first_cycle
from ..support.release_postgres import postgres_image


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The simulated cluster the releases go on (the demo's nodes, the release's images run
    from this machine's environments), with the simulated dcgm-exporter as a Service."""
    if reason := z2jh.unavailable():
        pytest.skip(reason)
    docs = z2jh.render(z2jh.BASE, extra=sim_values())
    sim = z2jh.start_cluster(tmp_path_factory.mktemp("release"), docs, hub_python=live.HUB_PYTHON,
                             extra_images=[postgres_image()] if POSTGRES_BIN.is_dir() else [],
                             overrides={"bandwidth": "10GB/s", "gpu": {"collectionInterval": "1s"}})
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def base(cluster):
    """The base release: gpu-reclaim.yaml with TIMINGS, and carol in the admin page's role."""
    return install(cluster, *hub_variants(), extra={
        "custom": {"gpuReclaim": {"options": TIMINGS}},
        "hub": {"loadRoles": {"gpu-reclaim-admins": {"users": RECLAIM_ADMINS}}}})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def base_settings(base) -> dict:
    """The base release's service settings, once it has run a successful cycle."""
    await first_cycle(base)
    return settings(base)
