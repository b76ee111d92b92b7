"""The deadline a stopping server gives each of its kernels, in a file next to the kernel's
connection file (`kernel-<id>.json` → `kernel-<id>.stop-deadline`): the server writes it
when it stops, before it shuts its kernels down; the kernel reads it at its exit. The file
is in the server's runtime directory (the user's own, mode 0700) and named by the kernel's
random id, so it is this kernel's, of this stop. Standard library only: kernels import it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

#: the server's environment variable with the stop's grace period, in seconds (GPUReclaimSpawner
#: sets it from reclaim_grace_period)
GRACE_ENV = "JUPYTERHUB_GPU_RECLAIM_GRACE_PERIOD"
SUFFIX = ".stop-deadline"


def deadline_file(connection_file: str | os.PathLike) -> Path:
    return Path(connection_file).with_suffix(SUFFIX)


def write_deadline(connection_file: str | os.PathLike, deadline: float) -> None:
    """Write `deadline` (seconds since the epoch) for the kernel of `connection_file`, whole
    or not at all (a kernel never reads half of it)."""
    path = deadline_file(connection_file)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"deadline": deadline}, f)
    os.replace(partial, path)


def read_deadline(connection_file: str | os.PathLike) -> float | None:
    """The deadline written for this kernel (`connection_file`, or the deadline file itself);
    None when its server is not stopping."""
    try:
        value = json.loads(deadline_file(connection_file).read_text()).get("deadline")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def remove_stale(runtime_dir: str | os.PathLike, now: float | None = None) -> int:
    """Remove the deadline files of stops that are over (a kernel without on_reclaim never
    reads its own); how many."""
    now = time.time() if now is None else now
    removed = 0
    for path in Path(runtime_dir).glob(f"kernel-*{SUFFIX}"):
        deadline = read_deadline(path)
        if deadline is None or deadline < now:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
