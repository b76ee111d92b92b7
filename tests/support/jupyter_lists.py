"""What jupyter-server and JupyterLab list in a Python environment: the server extensions
its config dir enables (each validated: imported) and the prebuilt frontends in its
labextensions dir, as `jupyter server extension list` and `jupyter labextension list` print
them, run by that environment's Python without the tests' own JUPYTER* and PYTHON* variables."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def output(python: str, *args: str) -> str:
    """What `python *args` prints (stdout, then stderr, without colours), without the tests'
    JUPYTER* and PYTHON* variables."""
    done = subprocess.run([python, *args], capture_output=True, text=True, timeout=120, check=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))})
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)


def listed(python: str, prefix: Path) -> tuple[str, str]:
    """The server extensions listed under `prefix`'s config dir, and the frontends listed
    under its labextensions dir, by the Python `python` (of the environment at `prefix`)."""
    servers = output(python, "-m", "jupyter_server.extension.serverextension", "list")
    server_section = servers.split(f"Config dir: {prefix / 'etc' / 'jupyter'}\n", 1)[1].split("Config dir:", 1)[0]
    labs = output(python, "-m", "jupyterlab.labextensions", "list")
    return server_section, labs.split(f"{prefix / 'share' / 'jupyter' / 'labextensions'}\n", 1)[1]
