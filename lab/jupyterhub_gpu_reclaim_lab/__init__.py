"""The JupyterLab extension's server side, loaded by the single-user server (jupyter-server):
`gpu-reclaim/status`, `gpu-reclaim/keep-alive` and `gpu-reclaim/stop` under the server's
base URL, answered by calling the reclaim service with the server's own hub token. The
frontend (labextension/ in the repository, built into `labextensions/` here) reads them.
Before a reclaim stops the server, its open tabs save their unsaved documents (saving.py).
When the server stops, its tabs are told why if it is a reclaim (stopped.py), its kernels get
the window the spawner gave it (window.py), and code a kernel registered with `on_reclaim`
runs (kernel.py).
Its own distribution, jupyterhub-gpu-reclaim-lab (lab/pyproject.toml), for the user image:
it imports nothing of jupyterhub_gpu_reclaim, the hub-side package."""

from __future__ import annotations

from typing import Any

from .kernel import deadline, on_reclaim

__all__ = ["deadline", "on_reclaim"]

#: the release, the same as jupyterhub_gpu_reclaim.__version__ (tests/packaging checks it)
__version__ = "0.1.0"

#: the npm package's name: the folder under share/jupyter/labextensions
LABEXTENSION = "jupyterhub-gpu-reclaim"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": f"labextensions/{LABEXTENSION}", "dest": LABEXTENSION}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .stopped import StopNoticeApp
    from .window import KernelWindow

    return [{"module": "jupyterhub_gpu_reclaim_lab"},
            {"module": "jupyterhub_gpu_reclaim_lab.window", "app": KernelWindow},
            {"module": "jupyterhub_gpu_reclaim_lab.stopped", "app": StopNoticeApp}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .handlers import setup_handlers
    from .install_check import FRONTEND_MISSING, frontend_folder

    setup_handlers(serverapp)
    if frontend_folder() is None:  # half installed: said once, where the admin looks
        from jupyter_core.paths import jupyter_path

        serverapp.log.warning("jupyterhub-gpu-reclaim-lab: " + FRONTEND_MISSING.format(
            where=", ".join(jupyter_path("labextensions"))))


async def _start_jupyter_server_extension(serverapp: Any) -> None:
    from .handlers import WATCHER

    serverapp.web_app.settings[WATCHER].start()
