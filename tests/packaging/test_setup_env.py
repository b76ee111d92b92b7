"""The environment scripts/setup.sh made, which the tests run from and the demo's and the
tests' single-user servers too (their command from its bin/: the simulator's kubelet puts it
first on PATH): jupyterhub-gpu-reclaim-lab installed from the worktree (an editable install,
whose build and config the set-up links in), its server extension enabled and valid, its
frontend found. Nothing puts lab/ on a path: without the install, the servers have no GPU
status, and this test says why."""

from __future__ import annotations

import importlib
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from ..support.jupyter_lists import listed
from ..support.live import LAB

DIST = "jupyterhub-gpu-reclaim-lab"


def test_the_servers_load_the_worktrees_lab_extension_from_the_install():
    dist = next(iter(metadata.distributions(name=DIST)), None)
    if dist is None:
        pytest.fail(f"{DIST} is not installed in {sys.prefix}: run scripts/setup.sh (make setup)")
    assert json.loads(dist.read_text("direct_url.json") or "{}") == {"url": LAB.as_uri(), "dir_info": {"editable": True}}
    module = importlib.import_module("jupyterhub_gpu_reclaim_lab")
    assert Path(module.__file__ or "").parent == LAB / "jupyterhub_gpu_reclaim_lab"
    servers, labs = listed(sys.executable, Path(sys.prefix))
    version = re.escape(dist.version)
    assert re.search(r"^\s+jupyterhub_gpu_reclaim_lab enabled\s+- Validating jupyterhub_gpu_reclaim_lab\.\.\.\s+"
                     rf"jupyterhub_gpu_reclaim_lab {version} OK$", servers, re.M), servers
    assert re.search(rf"^\s+{module.LABEXTENSION} v{version} enabled OK$", labs, re.M), labs
