"""Words users read in more than one place, written once: what a reclaim keeps and loses
(the warnings and reclaim notices, the user page and the API's reclaim records), when a
waiting user can expect a GPU, and how GPU utilization is written (the notices' evidence, the pages' tables and sparklines).
The JupyterLab extension shows KEEPS and LOSES as the user API sends them (web/api.py): it
keeps no copy."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .durations import format_duration

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


def expected_free(at: dt.datetime, now: dt.datetime) -> str:
    """What a user waiting for a GPU is told when scheduled reclaims will free one (the
    spawn progress, the user page): "a GPU is expected to be free in about 3 min"."""
    return f"a GPU is expected to be free in about {format_duration(max(dt.timedelta(minutes=1), at - now))}"


def spark_label(values: list[float | None], threshold: float | None, window: dt.timedelta) -> str:
    """What a utilization sparkline says to a screen reader and on hover (the service's pages,
    the JupyterLab status bar): "GPU utilization over the last 2 h, latest 3 %; idle below 1 %"."""
    last = next((v for v in reversed(values) if v is not None), None)
    hours = f"{window.total_seconds() / 3600:g} h"
    label = (f"GPU utilization over the last {hours}, latest {format_util(last)}" if last is not None
             else f"no GPU data in the last {hours}")
    return label + (f"; idle below {format_util(threshold)}" if threshold is not None else "")
