"""Where the web layer's files are: its page templates, the hub templates and static/."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
#: for `c.JupyterHub.template_paths`: the hub templates showing reclaim state (docs/api.md)
HUB_TEMPLATES = str(HERE.parent / "hub_templates")


def static_dir() -> Path:
    """The top-level static/ folder: in a checkout, else where the package installed it."""
    for candidate in (HERE.parent.parent / "static",
                      Path(sys.prefix) / "share" / "jupyterhub-gpu-reclaim" / "static"):
        if (candidate / "reclaim.js").is_file():
            return candidate
    return HERE.parent.parent / "static"
