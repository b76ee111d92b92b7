"""Whether both halves of the JupyterLab extension are where the single-user server finds
them: the frontend (share/jupyter/labextensions/jupyterhub-gpu-reclaim) and the server side
(enabled in jupyter_server_config.d). With only the frontend, it asks the server for the
session's state and gets 404s, and users see nothing; with only the server side, the same.
`python -m jupyterhub_gpu_reclaim_lab.install_check` says which half is missing (exit 1), in
the user image's build, in the set-up and in the demo; the server side says it in the
server's log when the frontend is missing (docs/troubleshooting.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from jupyter_core.paths import jupyter_config_path, jupyter_path

from . import LABEXTENSION

MODULE = "jupyterhub_gpu_reclaim_lab"
FRONTEND_MISSING = (f"the JupyterLab extension's frontend ({LABEXTENSION}) is not in any labextensions folder "
                    "({where}): JupyterLab shows no GPU state. Install the jupyterhub-gpu-reclaim-lab "
                    "package with pip into the single-user server's environment (its data files carry it).")
SERVER_MISSING = (f"the JupyterLab extension's server side ({MODULE}) is not enabled for jupyter-server: the "
                  "frontend's requests for the GPU state get 404 and users see nothing. Install the "
                  "jupyterhub-gpu-reclaim-lab package with pip into the single-user server's environment "
                  f"(it enables itself in etc/jupyter/jupyter_server_config.d), or run "
                  f"`jupyter server extension enable {MODULE}`.")


def frontend_folder() -> Path | None:
    """The frontend's folder where JupyterLab looks for prebuilt extensions; None without."""
    return next((Path(p) / LABEXTENSION for p in jupyter_path("labextensions")
                 if (Path(p) / LABEXTENSION / "package.json").is_file()), None)


def server_side_enabled() -> bool:
    """Whether jupyter-server's config (every config folder, as the server reads them)
    enables the server side."""
    from jupyter_server.extension.config import ExtensionConfigManager

    return bool(ExtensionConfigManager(read_config_path=jupyter_config_path()).enabled(MODULE))


def problems() -> list[str]:
    """What is missing, in words; [] when both halves are in place."""
    found = []
    if frontend_folder() is None:
        found.append(FRONTEND_MISSING.format(where=", ".join(jupyter_path("labextensions"))))
    if not server_side_enabled():
        found.append(SERVER_MISSING)
    return found


def main() -> int:
    missing = problems()
    for line in missing:
        print(f"jupyterhub-gpu-reclaim-lab: {line}", file=sys.stderr)
    if not missing:
        print(f"jupyterhub-gpu-reclaim-lab: the frontend ({frontend_folder()}) and the server side are installed")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
