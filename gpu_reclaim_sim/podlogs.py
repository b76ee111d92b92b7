"""Pod logs: which container a log request reads, why a log is missing in the apiserver's
words, reading a log, and the tail of a log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import errors
from .store import Obj


def _log_container(pod: Obj, requested: str | None) -> str:
    spec = pod.get("spec") or {}
    names = [c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
             for c in spec.get(key) or []]
    name = pod["metadata"]["name"]
    if requested:
        if requested not in names:
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    main = [c.get("name") for c in spec.get("containers") or []]
    if len(main) == 1:
        return main[0]
    raise errors.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                             f"[{' '.join(main)}]")


def _container_state(pod: Obj, container: str) -> dict[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for c in status.get(key) or []:
            if c.get("name") == container:
                return c.get("state") or {}
    return None


def _explain_missing_log(pod: Obj, container: str) -> None:
    """No log file yet: answer what the kubelet would, or carry on with an empty log."""
    name = pod["metadata"]["name"]
    if not (pod.get("spec") or {}).get("nodeName"):
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    state = _container_state(pod, container)
    if state is None or state.get("waiting") is not None:
        reason = ((state or {}).get("waiting") or {}).get("reason") or "ContainerCreating"
        raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


def _terminated(pod: Obj, container: str) -> bool:
    state = _container_state(pod, container) or {}
    return bool(state.get("terminated")) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _read_log(path: Path, offset: int = 0) -> bytes | None:
    """The log from byte `offset` on, or None when there is no log file. Blocking: a log can
    be megabytes on a slow disk, so the apiserver calls it in a thread."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return None


def _tail(data: bytes, lines: int | None, limit_bytes: int | None) -> bytes:
    if lines is not None and lines >= 0:
        parts = data.splitlines(keepends=True)
        data = b"".join(parts[-lines:]) if lines else b""
    if limit_bytes is not None and limit_bytes > 0:
        data = data[:limit_bytes]
    return data
