"""The JupyterHub 5 pass's hub environment (.venv-jh5, built by scripts/setup.sh) is the
z2jh chart's hub image with the package added as examples/hub-image/Dockerfile adds it:
every package of the image at the image's version, JupyterHub 5.5 and KubeSpawner 7.1
included, and the package's service and spawner importable there."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from gpu_reclaim_sim.paths import REPO

from ..support import live

REQUIREMENTS = REPO / "scripts" / "z2jh-hub-image-requirements.txt"


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _hub_python(code: str) -> str:
    return subprocess.run([live.HUB_PYTHON, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60).stdout


@pytest.mark.hub_contract
@pytest.mark.jupyterhub(5, reason="the JupyterHub 5 pass runs the hub from the chart's hub image")
def test_installing_the_package_changed_nothing_of_the_charts_hub_image():
    pins = dict(line.split("==") for line in REQUIREMENTS.read_text().split("\n")
                if line and not line.startswith("#"))
    installed = json.loads(_hub_python(
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"))
    installed = {_name(name): version for name, version in installed.items()}
    assert pins["jupyterhub"] == "5.5.0" and pins["jupyterhub-kubespawner"] == "7.1.0"
    changed = {name: (version, installed.get(_name(name))) for name, version in pins.items()
               if installed.get(_name(name)) != version}
    assert not changed
    assert "jupyterhub-gpu-reclaim" in installed
    _hub_python("import jupyterhub_gpu_reclaim.service.cycle, jupyterhub_gpu_reclaim.spawner")
