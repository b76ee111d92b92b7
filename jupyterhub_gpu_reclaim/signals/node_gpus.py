"""The cluster's GPUs, for the admin page's headline ("3 of 4 GPUs and 7 MIG slices held"):
the GPU resources (`pod_facts.is_gpu_resource`, counted as a pod's GPUs are) allocatable on
the nodes, each kind apart (`pod_facts.gpu_kind`), read with the Kubernetes API's node list;
and how people read such counts (`in_words`, `kind_name`: the admin page, the spawn form,
the spawn progress). The service may not list nodes (the hub's Role in the z2jh chart grants
pods only; helm-values/rbac.yaml adds nodes, for the spawner): then, as on any failure, the
number is not known (None) and the headline says what is held."""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable, Mapping

from .http_source import MAX_BODY, entry_field, read_capped
from ..wording import count, listed
from .pod_facts import GPU_KINDS, GPU_PRODUCT_LABEL, by_kind

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.pods")

#: how often the node list is read again (seconds): nodes and their GPUs change rarely
EVERY_S = 60.0


#: GPUs by kind (GPU_KINDS' keys, in its order; kinds with none left out)
GpuCounts = dict[str, int]
#: the same as one immutable value that the pods alike share (`signals.pods.PodInfo`): (kind, n)
#: pairs, so that a pod asking for two kinds is said as it asks (`dict()` of it reads as GpuCounts)
GpuKinds = tuple[tuple[str, int], ...]


def gpus_of(node_list: Any) -> GpuCounts:
    """The GPUs of each kind allocatable on the nodes of a node list (JSON as served); a value
    that is not a whole number counts none; ValueError for a body that is not a list."""
    def of(node: Any) -> GpuCounts:
        status = node.get("status") if isinstance(node, dict) else None
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        labels = (node.get("metadata") or {}).get("labels") if isinstance(node, dict) else None
        product = labels.get(GPU_PRODUCT_LABEL) if isinstance(labels, dict) else None
        if not isinstance(allocatable, dict):
            return {}
        return by_kind({k: int(v) for k, v in allocatable.items() if isinstance(v, str) and v.isascii() and v.isdigit()},
                       product if isinstance(product, str) else "")

    return summed(of(node) for node in entry_field(node_list, "items", list, []))


def summed(counts: Iterable[Mapping[str, int]]) -> GpuCounts:
    """GPUs by kind of several (pods, requests) added up, in GPU_KINDS' order; kinds with none
    left out."""
    total = dict.fromkeys(GPU_KINDS, 0)
    for c in counts:
        for k, n in c.items():
            total[k] += n
    return {k: n for k, n in total.items() if n}


def in_words(total: Mapping[str, int], part: Mapping[str, int] | None = None) -> str:
    """GPUs by kind as people read them: "4 GPUs and 7 MIG slices"; with `part` (those free
    or held of each kind), "2 of 4 GPUs and 3 of 7 MIG slices"; "0 GPUs" for none."""
    said = [(f"{part.get(k, 0)} of " if part is not None else "") + count(n, GPU_KINDS[k])
            for k, n in total.items() if n]
    return listed(said) or count(0, "GPU")


def kind_name(gpus: Mapping[str, int]) -> str:
    """What one of `gpus` (by kind) is called where a sentence speaks of one ("a free MIG
    slice"): its kind's name, or a GPU's for whole GPUs, for several kinds, or for none."""
    kinds = [k for k, n in gpus.items() if n]
    return GPU_KINDS[kinds[0] if len(kinds) == 1 else "gpu"]


async def read_gpu_capacity(api: Any, timeout: float) -> tuple[GpuCounts | None, str]:
    """(the cluster's GPUs by kind, "") from `api` (kubernetes_asyncio's CoreV1Api), or (None, why not)."""
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
