"""The two distributions, built as a release builds them (`pip wheel`, offline): the
hub-side jupyterhub-gpu-reclaim (the repository's root) and jupyterhub-gpu-reclaim-lab (lab/),
which a user image installs alone (docs/lab.md). The lab wheel brings none of the hub side's
dependencies and imports none of its code; the extension's built files travel once, in the lab
wheel, where jupyter-server and JupyterLab find them once installed."""

from __future__ import annotations

import ast
import email.parser
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import jupyterhub_gpu_reclaim
import jupyterhub_gpu_reclaim_lab
from jupyterhub_gpu_reclaim_lab import LABEXTENSION

from ..support.jupyter_lists import listed, output
from ..support.live import LAB, REPO

BUILD = LAB / "jupyterhub_gpu_reclaim_lab" / "labextensions" / LABEXTENSION  # scripts/setup.sh
LAB_DATA = f"data/share/jupyter/labextensions/{LABEXTENSION}/"
CONFIG = "data/etc/jupyter/jupyter_server_config.d/jupyterhub_gpu_reclaim_lab.json"
#: what the source trees hold that is no part of a build (a copy builds from clean trees)
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv*", ".demo", "node_modules", "build", "dist", "*.egg-info",
                                    "__pycache__", ".*_cache", ".hypothesis", ".setup-stamp")


def requirement_name(line: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", line, maxsplit=1)[0].lower().replace("_", "-")


def pip_freeze() -> str:
    """The tests' own environment's packages."""
    return subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=True, timeout=60).stdout


class Wheel:
    def __init__(self, path: Path) -> None:
        self.path = path
        with zipfile.ZipFile(path) as z:
            self.files = {name: z.read(name) for name in z.namelist() if not name.endswith("/")}
        dist_info = next(n for n in self.files if n.endswith(".dist-info/METADATA"))
        self.metadata = email.parser.BytesParser().parsebytes(self.files[dist_info])
        self.data = dist_info.removesuffix("dist-info/METADATA") + "data/"

    def requires(self, extra: str | None = None) -> dict[str, str]:
        """{name: requirement} of Requires-Dist, those of one extra or those without one."""
        out = {}
        for line in self.metadata.get_all("Requires-Dist") or []:
            marker = re.search(r"""extra\s*==\s*["']([^"']+)["']""", line)
            if (marker.group(1) if marker else None) == extra:
                out[requirement_name(line)] = line
        return out


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Wheel]:
    if not (BUILD / "package.json").is_file():
        pytest.fail(f"the JupyterLab extension is not built ({BUILD}): run scripts/setup.sh")
    if int(metadata.version("setuptools").split(".")[0]) < 77:  # the test extra's, lab/pyproject.toml's
        pytest.fail(f"setuptools {metadata.version('setuptools')} cannot build lab/ offline: run scripts/setup.sh")
    tmp = tmp_path_factory.mktemp("wheels")
    shutil.copytree(REPO, tmp / "src", ignore=NOT_SOURCE, symlinks=True)
    out = tmp / "dist"
    for project in (tmp / "src", tmp / "src" / "lab"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
                        "-q", "-w", str(out), str(project)], check=True, timeout=300)
    built = {Wheel(p).metadata["Name"]: Wheel(p) for p in out.glob("*.whl")}
    assert set(built) == {"jupyterhub-gpu-reclaim", "jupyterhub-gpu-reclaim-lab"}
    return built


def test_the_lab_wheel_needs_only_jupyter_server(wheels):
    lab, hub = wheels["jupyterhub-gpu-reclaim-lab"], wheels["jupyterhub-gpu-reclaim"]
    assert {"jupyterhub", "jupyterhub-kubespawner", "sqlalchemy", "kubernetes-asyncio", "aiosmtplib"} <= set(hub.requires())
    assert set(lab.requires()) == {"jupyter-core", "jupyter-server", "tornado", "traitlets"}
    assert not lab.metadata.get_all("Provides-Extra")
    # its modules import nothing of the hub side: they run where it is not installed
    modules = {n: body for n, body in lab.files.items() if n.endswith(".py")}
    assert set(modules) == {f"jupyterhub_gpu_reclaim_lab/{m}.py"
                            for m in ("__init__", "handlers", "install_check", "kernel", "saving", "stopped", "stopping", "window")}
    for name, body in modules.items():
        for node in ast.walk(ast.parse(body)):
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not [m for m in imported if m.split(".")[0] == "jupyterhub_gpu_reclaim"], name


def test_the_gpl_speed_up_is_the_tests_alone(wheels):
    # rfc3987 (GPL-3.0) only speeds the tests' processes up (setup.cfg): no install of the
    # package, its simulator or its demo pulls it in
    hub = wheels["jupyterhub-gpu-reclaim"]
    assert "rfc3987" in hub.requires("test")
    assert not [extra for extra in [None, *hub.metadata.get_all("Provides-Extra")] if extra != "test"
                and "rfc3987" in hub.requires(extra)]


def test_the_extension_travels_once_in_the_lab_wheel(wheels):
    lab = wheels["jupyterhub-gpu-reclaim-lab"]
    built = {p.relative_to(BUILD).as_posix(): p.read_bytes()
             for p in BUILD.rglob("*") if p.is_file() and p.name != ".setup-stamp"}
    assert "package.json" in built and any(n.startswith("static/remoteEntry.") for n in built)
    for rel, body in built.items():
        copies = [(w.metadata["Name"], n) for w in wheels.values() for n in w.files
                  if n.endswith(f"{LABEXTENSION}/{rel}")]
        assert copies == [("jupyterhub-gpu-reclaim-lab", lab.data + LAB_DATA + rel)], rel
        assert lab.files[lab.data + LAB_DATA + rel] == body, rel
    # nothing of the extension in the hub-side wheel: not its code, build or config
    hub = wheels["jupyterhub-gpu-reclaim"]
    assert not [n for n in hub.files if re.search(r"labext|jupyter_server_config|jupyterhub_gpu_reclaim_lab", n)]
    assert json.loads(lab.files[lab.data + CONFIG]) == {
        "ServerApp": {"jpserver_extensions": {"jupyterhub_gpu_reclaim_lab": True}}}


def test_the_installed_lab_wheel_is_what_jupyter_finds(wheels, tmp_path):
    """Installed alone into an environment of its own (which sees this one's jupyter-server
    and JupyterLab, as a user image has them), jupyter-server finds and validates the server
    extension from the wheel's code and config, and JupyterLab the prebuilt frontend."""
    lab = wheels["jupyterhub-gpu-reclaim-lab"]
    env_dir = tmp_path / "image"
    venv.create(env_dir, with_pip=False)
    python = str(env_dir / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # this environment's libraries after the image's own (its editable install of lab/ stays out:
    # a path a .pth file adds has its own .pth files ignored)
    (site / "test-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # by the image's own Python (its pip this environment's, through the .pth), so that pip
    # installs into the image and leaves this environment alone (--ignore-installed: it does
    # not even try to uninstall this one's jupyterhub-gpu-reclaim-lab first, as this
    # environment's pip with --prefix did, from .venv)
    ours = pip_freeze()
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                    "--disable-pip-version-check", "-q", str(lab.path)], check=True, timeout=120)
    assert pip_freeze() == ours, "installing the lab wheel changed the tests' own environment"

    module = output(python, "-c", "import jupyterhub_gpu_reclaim_lab as m; print(m.__file__)")
    assert Path(module.strip()).is_relative_to(site)
    servers, labs = listed(python, env_dir)
    assert re.match(r"\s+jupyterhub_gpu_reclaim_lab enabled\s+- Validating jupyterhub_gpu_reclaim_lab\.\.\.\s+"
                    rf"jupyterhub_gpu_reclaim_lab {re.escape(lab.metadata['Version'])} OK\s*$", servers), servers
    assert re.match(rf"\s+{LABEXTENSION} v{re.escape(lab.metadata['Version'])} enabled OK\s*$", labs), labs


def test_one_version(wheels):
    """The two releases move together (the demo extra pins the lab's)."""
    lab, hub = wheels["jupyterhub-gpu-reclaim-lab"], wheels["jupyterhub-gpu-reclaim"]
    version = jupyterhub_gpu_reclaim.__version__
    assert lab.metadata["Version"] == hub.metadata["Version"] == jupyterhub_gpu_reclaim_lab.__version__ == version
    assert json.loads((REPO / "labextension" / "package.json").read_text())["version"] == version
    assert requirement_name(pin := hub.requires("demo")["jupyterhub-gpu-reclaim-lab"]) and f"=={version}" in pin
