"""A container's log as the kubelet reads it for `kubectl logs`, as the node agent's kubelet API
serves it: reading the file the runtime writes,
its tail, and why a container has no log yet, in the kubelet's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..objects import Obj


def container_state(pod: Obj, container: str) -> dict[str, Any] | None:
    """The container's `state` in the pod's status; None when the status does not name it."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for c in status.get(key) or []:
            if c.get("name") == container:
                return c.get("state") or {}
    return None


def not_started(pod: Obj, container: str) -> str | None:
    """Why the container has no log to read yet (the kubelet's validateContainerLogStatus), or
    None when it has run."""
    state = container_state(pod, container)
    if state is None or state.get("waiting") is not None:
        reason = ((state or {}).get("waiting") or {}).get("reason") or "ContainerCreating"
        return f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start: {reason}'
    return None


def no_previous(pod: Obj, container: str) -> str:
    return f'previous terminated container "{container}" in pod "{pod["metadata"]["name"]}" not found'


def read_log(path: Path, offset: int = 0) -> bytes | None:
    """The log from byte `offset` on, or None when there is no log file. Blocking: a log can
    be megabytes on a slow disk, so callers run it in a thread."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return None


def tail(data: bytes, lines: int | None, limit_bytes: int | None) -> bytes:
    """The last `lines` lines, then at most `limit_bytes` of them (PodLogOptions)."""
    if lines is not None and lines >= 0:
        parts = data.splitlines(keepends=True)
        data = b"".join(parts[-lines:]) if lines else b""
    if limit_bytes is not None and limit_bytes > 0:
        data = data[:limit_bytes]
    return data
