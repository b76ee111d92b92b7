"""The documentation builds without warnings, and its tables say what the code does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_reclaim_sim.paths import REPO
from gpu_reclaim_sim.z2jh.release import CHART, chart_missing
from jupyterhub_gpu_reclaim.application import IDLE_CULLER_OPTIONS, GpuReclaim

from ..support.docs import table_rows

DOCS = REPO / "docs"


def test_mkdocs_build_strict(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.fail("mkdocs is not installed: pip install -e '.[test]'")
    result = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    # the home page is the README, with its docs/ links turned into the site's pages
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Give idle GPUs on a shared JupyterHub back" in index
    assert 'href="sim/"' in index and 'href="docs/sim.md"' not in index


def test_nav_lists_every_page():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    pages = {p.name for p in DOCS.glob("*.md")}
    # docs/api.md is written with the web pages; it joins the nav when it exists
    assert pages - listed <= {"api.md"}, pages - listed
    assert listed <= pages


def culler_options() -> set[str]:
    """jupyterhub-idle-culler's own options, from its --help."""
    out = subprocess.run([sys.executable, "-m", "jupyterhub_idle_culler", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    traits = set(re.findall(r"Equivalent to: \[--IdleCuller\.(\w+)", out))
    return traits - {"generate_config", "config_file"}


def test_migration_table_is_flag_for_flag():
    rows = table_rows(DOCS / "migrating.md", "jupyterhub-idle-culler")
    culler = {row[0].strip("`") for row in rows}
    ours = {row[2].strip("`") for row in rows}
    expected = {"--" + name.replace("_", "-") for name in IDLE_CULLER_OPTIONS}
    assert culler == expected == ours
    assert {"--" + t.replace("_", "-") for t in culler_options()} == expected
    aliases = GpuReclaim.aliases
    assert all(flag[2:] in aliases for flag in ours)
    if chart_missing() is None:  # the chart's cull.* options, where the chart is beside the clone
        cull = yaml.safe_load((CHART / "values.yaml").read_text())["cull"]
        named = {row[1].strip("`") for row in rows if row[1].startswith("`cull.")}
        assert named == {f"cull.{key}" for key in cull if key != "enabled"}
