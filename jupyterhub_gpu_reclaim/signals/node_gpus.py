"""The cluster's GPUs, for the admin page's headline ("3 of 4 GPUs held"): the GPU resources
(`pod_facts.is_gpu_resource`, counted as a pod's GPUs are) allocatable on the nodes, read
with the Kubernetes API's node list. The service may not list nodes (the hub's Role in the
z2jh chart grants pods only; helm-values/rbac.yaml adds nodes, for the spawner): then, as on
any failure, the number is not known (None) and the headline says what is held."""

from __future__ import annotations

import json
import logging
from typing import Any

from .http_source import MAX_BODY, entry_field, read_capped
from .pod_facts import is_gpu_resource

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.pods")

#: how often the node list is read again (seconds): nodes and their GPUs change rarely
EVERY_S = 60.0


def gpus_of(node_list: Any) -> int:
    """The GPUs allocatable on the nodes of a node list (JSON as served); a value that is
    not a whole number counts none; ValueError for a body that is not a list."""
    total = 0
    for node in entry_field(node_list, "items", list, []):
        status = node.get("status") if isinstance(node, dict) else None
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        if isinstance(allocatable, dict):
            total += sum(int(v) for k, v in allocatable.items()
                         if is_gpu_resource(k) and isinstance(v, str) and v.isdigit())
    return total


async def read_gpu_capacity(api: Any, timeout: float) -> tuple[int | None, str]:
    """(the cluster's GPUs, "") from `api` (kubernetes_asyncio's CoreV1Api), or (None, why not)."""
    try:
        resp = await api.list_node(_request_timeout=timeout, _preload_content=False)
        try:
            if not 200 <= resp.status <= 299:
                return None, f"HTTP {resp.status}"
            text = await read_capped(resp.content, resp.content_length, MAX_BODY["pods"])
        finally:
            resp.release()
        if text is None:
            return None, f"a node list larger than {MAX_BODY['pods']} bytes"
        return gpus_of(json.loads(text)), ""
    except Exception as e:  # ApiException, aiohttp errors, timeouts, a body that is not JSON
        return None, f"{type(e).__name__}: {str(e)[:200]}"
