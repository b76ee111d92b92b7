"""Words users read in more than one place, written once: how a server is named (the logs,
the pages' confirmations), how a time and how long until or
since it are written (`clock`, `relative`, `moment`: the pages, the notices, the API's
texts), how a count of things is written (`count`, `plural`: "1 GPU", "2 GPUs"), what a reclaim keeps and loses (the warnings and reclaim notices, the user page and
the API's reclaim records), when a waiting user can expect a GPU, and how GPU utilization is
written (the notices' evidence, the pages' tables and sparklines).
The JupyterLab extension shows KEEPS and LOSES as the user API sends them (web/api.py): it
keeps no copy."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .durations import format_duration

KEEPS = "files under your home directory"
LOSES = ("running processes, kernel state and variables, GPU memory, files in /tmp, "
         "and packages installed outside your home directory")
#: what became of a document a JupyterLab tab was asked to save before the stop
#: (`observations.SAVE_OUTCOMES`), as the pages say it after its name
SAVE_OUTCOME_WORDS = {
    "saved": "saved",
    "would-save": "would have been saved (dry run)",
    "saving": "not saved: its save had not finished when the server stopped",
    "read-only": "not saved: read-only",
    "conflict": "not saved: the file changed on disk since it was opened (not overwritten)",
    "failed": "not saved: the save failed",
}


def server_name(session: str) -> str:
    """A server as people name it, from its session id ("user/servername"): "alice" for
    alice's default server (the id "alice/"), "alice/gpu" for her server named gpu."""
    return session[:-1] if session.endswith("/") else session


def clock(t: dt.datetime, now: dt.datetime) -> str:
    """A time as people read it: "13:33 UTC" on the (UTC) day of `now`, else
    "2026-12-05 13:33 UTC". The pages show it in the browser's zone: static/reclaim.js
    writes the same ("08:33", "2026-12-05 08:33") there, with this text on hover."""
    t = t.astimezone(dt.timezone.utc)
    same_day = t.date() == now.astimezone(dt.timezone.utc).date()
    return t.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")


def exact_utc(t: dt.datetime) -> str:
    """A time in full and in UTC, as a time shown in the reader's zone says it on hover:
    "2026-12-05 13:33:20 UTC"."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(t: dt.datetime, now: dt.datetime) -> str:
    """How soon or how long ago, within a day: "in 18 min", "3 min ago", "in 40 s", "now";
    "" a day or more away. `format_duration`'s words and rounding (down: never overstated)."""
    seconds = (t - now).total_seconds()
    if abs(seconds) >= 86400:
        return ""
    if abs(seconds) < 1:
        return "now"
    words = format_duration(abs(seconds))
    return f"in {words}" if seconds > 0 else f"{words} ago"


def moment(t: dt.datetime, now: dt.datetime) -> str:
    """`clock` and `relative` together, as text says a time: "13:33 UTC (in 18 min)"."""
    rel = relative(t, now)
    return clock(t, now) + (f" ({rel})" if rel else "")


def plural(n: float, noun: str) -> str:
    """`noun` as it follows the number `n`: "GPU" after 1, "GPUs" after 0, 2 or 1.5; the one
    place the pages' counted words get their plural."""
    return noun if n == 1 else noun + "s"


def count(n: float, noun: str) -> str:
    """A number of things as people read it: "1 GPU", "2 GPUs", "0 spawns", "1.5 GPU-hours"."""
    return f"{n:.10g} {plural(n, noun)}"


def listed(items: list[str]) -> str:
    """Things in a sentence: "a", "a and b", "a, b and c"."""
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1]))) if items else ""


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


def expected_free(at: dt.datetime, now: dt.datetime, kind: str = "GPU") -> str:
    """What a user waiting for a GPU is told when scheduled reclaims will free one (the
    spawn progress, the user page): "a GPU is expected to be free in about 3 min"; `kind`
    what one of those waited for is called (node_gpus.kind_name: "a MIG slice is …")."""
    return f"a {kind} is expected to be free in about {format_duration(max(dt.timedelta(minutes=1), at - now))}"


def spark_label(values: list[float | None], threshold: float | None, window: dt.timedelta) -> str:
    """What a utilization sparkline says to a screen reader and on hover (the service's pages,
    the JupyterLab status bar): "GPU utilization over the last 2 h, latest 3 %; idle below 1 %"."""
    last = next((v for v in reversed(values) if v is not None), None)
    hours = f"{window.total_seconds() / 3600:g} h"
    label = (f"GPU utilization over the last {hours}, latest {format_util(last)}" if last is not None
             else f"no GPU data in the last {hours}")
    return label + (f"; idle below {format_util(threshold)}" if threshold is not None else "")
