"""The words the extension shows that the hub side shows too: what a stop keeps and loses,
and how GPU utilization is written. Their source is jupyterhub_gpu_reclaim/wording.py; this
is a copy because the user image installs this distribution without the hub-side package
(and the hub image must not get jupyter-server for it). tests/packaging/test_wheels.py fails
when the copy and its source differ: change both together."""

from __future__ import annotations

from typing import Any

KEEPS = "files under your home directory"
LOSES = ("running processes, kernel state and variables, GPU memory, files in /tmp, "
         "and packages installed outside your home directory")


def format_util(values: Any, missing: str = "no data") -> str:
    """Utilization in percent, one value or one per GPU: "37 %", "4.5 % / 0 %"; `missing`
    for no data (None, an empty list, a GPU without a value)."""
    if values is None:
        return missing
    if not isinstance(values, (list, tuple)):
        values = (values,)
    return " / ".join(missing if v is None else _percent(v) for v in values) or missing


def _percent(value: Any) -> str:
    try:
        return f"{round(float(value), 1):g} %"
    except (TypeError, ValueError):  # evidence read back from the store is JSON: show it as is
        return str(value)
