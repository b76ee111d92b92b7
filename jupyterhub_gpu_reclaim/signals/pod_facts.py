"""What a single-user pod says about its GPUs and its session: the facts the reclaim service
(`signals.pods`) and GPUReclaimSpawner (in the hub, from KubeSpawner's reflector) both read,
each computed here once. Pure functions of one pod in its JSON form (camelCase keys, as the
API serves it and KubeSpawner's reflector holds it); no I/O.

- Which resources are GPUs: whole ones (`nvidia.com/gpu`), MIG instances
  (`nvidia.com/mig-<profile>`) and time-sliced replicas (`nvidia.com/gpu.shared`) each count
  as one GPU; where people read how many there are, each kind by its name (`gpu_kind`).
- The GPUs a pod holds or waits for: its effective request of those resources, as the
  scheduler places it and the node keeps it reserved (`kube.pod_requests`: init and sidecar
  containers, overhead; https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/).
- Whether it waits for a GPU, and since when: not bound and not being deleted, Pending, and
  its PodScheduled condition False with reason Unschedulable (kube-scheduler could not place
  it) because a GPU resource is short; since the condition's last transition (kept across the
  scheduler's retries), else the pod's creation.
- Its place in the GPU queue (kube-scheduler's PrioritySort: higher priority first, then the
  longer waiting).
- Its GPU type and whether its GPU is time-sliced, and the annotations GPUReclaimSpawner
  writes (the profile applied, "keep alive until").

Each function raises ValueError, naming the field, for a pod whose fields it reads are
malformed: the service holds such a pod's session, the spawner shows KubeSpawner's own line.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..oneline import brief
from ..timestamps import parse_time
from . import kube
from .http_source import entry_field, entry_objects, entry_time

GPU_RESOURCE = "nvidia.com/gpu"
# the device plugin's time-slicing with renameByDefault: a replica of a GPU others share
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
# its MIG "mixed" strategy: one resource per profile, nvidia.com/mig-1g.10gb, ...
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# renameByDefault's suffix of a replica's resource (of a whole GPU or of a MIG profile)
REPLICA_SUFFIX = ".shared"
MAX_GPUS = 1024  # of one resource per pod; more is a malformed pod (per-GPU lists are sized by it)
USER_KEY = "hub.jupyter.org/username"
SERVER_KEY = "hub.jupyter.org/servername"
# "keep alive until" from the spawn form (GPUReclaimSpawner writes it; ISO 8601 UTC)
KEEPALIVE_ANNOTATION = "jupyterhub-gpu-reclaim/keepalive-until"
# the profile KubeSpawner applied (its slug; "" without a profile_list), which GPUReclaimSpawner
# writes: a spawn that names none gets the default one, whatever user_options say
PROFILE_ANNOTATION = "jupyterhub-gpu-reclaim/profile"
# GPU feature discovery's node label; a profile that picks a GPU type selects on it
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# its value's suffix on a node whose GPUs are time-sliced without renameByDefault (the
# replicas keep the name nvidia.com/gpu): "Tesla-T4-SHARED"
SHARED_PRODUCT_SUFFIX = "-SHARED"
# the PodScheduled condition's reason while kube-scheduler cannot place the pod (v1.PodReasonUnschedulable)
UNSCHEDULABLE = "Unschedulable"


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource is a GPU a pod holds: whole, a MIG instance or a replica."""
    return name in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)


#: the kinds of GPU resource (`gpu_kind`), in the order counts of them are written, and what
#: people call one of each ("2 of 4 GPUs and 3 of 7 MIG slices free")
GPU_KINDS = {"gpu": "GPU", "mig": "MIG slice", "shared": "shared GPU"}


def gpu_kind(name: str, product: str = "") -> str | None:
    """The kind (GPU_KINDS) of a GPU resource on a node whose GPU product label is `product`:
    a time-sliced replica (renamed, of a whole GPU or a MIG instance, or on a node whose
    product says -SHARED), a MIG instance, or a whole GPU; None for a resource that is no GPU."""
    if not is_gpu_resource(name):
        return None
    if name.endswith(REPLICA_SUFFIX) or (name == GPU_RESOURCE and product.endswith(SHARED_PRODUCT_SUFFIX)):
        return "shared"
    return "mig" if name.startswith(MIG_RESOURCE_PREFIX) else "gpu"


def by_kind(requests: Mapping[str, int], product: str = "") -> dict[str, int]:
    """GPU resources and their numbers (`gpu_requests`, a profile's) by kind (GPU_KINDS' keys,
    in its order; kinds with none left out) on nodes whose GPU product label is `product`."""
    out = dict.fromkeys(GPU_KINDS, 0)
    for name, n in requests.items():
        kind = gpu_kind(name, product)
        if kind is not None:
            out[kind] += n
    return {k: n for k, n in out.items() if n}


def gpu_resource_pattern(spell: Callable[[str], str]) -> str:
    """`is_gpu_resource` as a regular expression (Python's and Prometheus' RE2 alike) over
    resource names as `spell` writes them (kube-state-metrics: "nvidia_com_gpu")."""
    return "|".join((re.escape(spell(GPU_RESOURCE)), re.escape(spell(SHARED_GPU_RESOURCE)),
                     re.escape(spell(MIG_RESOURCE_PREFIX)) + ".+"))


def replica_resource_pattern(spell: Callable[[str], str]) -> str:
    """The resources of time-sliced replicas renamed by the device plugin, of a whole GPU or
    of a MIG profile (nvidia.com/mig-1g.5gb.shared), as `gpu_resource_pattern` writes them.
    (`gpu_shared` reads a pod's MIG replica as its own GPU.)"""
    return "|".join((re.escape(spell(SHARED_GPU_RESOURCE)),
                     re.escape(spell(MIG_RESOURCE_PREFIX)) + ".+" + re.escape(spell(REPLICA_SUFFIX))))


# kube-scheduler's "3 Insufficient nvidia.com/mig-1g.10gb." (the resource, then a comma, a
# period or the end). Only a shortage counts: "untolerated taint {nvidia.com/gpu: present}"
# also names the resource, but that is a pod kept off GPU nodes, not one waiting for a GPU.
_SHORTAGE = re.compile(r"Insufficient (nvidia\.com/\S+?)(?=[,.]?(?:\s|$))")


def gpu_shortage(message: str) -> bool:
    """Whether the scheduler's message says a GPU resource (is_gpu_resource) is short."""
    return any(is_gpu_resource(m.group(1)) for m in _SHORTAGE.finditer(message))


def _spec(pod: Any) -> dict[str, Any]:
    return entry_field(pod, "spec", dict, {})


def gpu_requests(pod: Any) -> dict[str, int]:
    """The pod's effective request of each GPU resource it names (kube.pod_requests), a
    whole number of GPUs each; resources it does not request are left out."""
    spec = _spec(pod)
    lists = [entry_field(spec, "overhead", dict, {})]
    for key in ("containers", "initContainers"):
        for c in entry_objects(spec, key):
            resources = entry_field(c, "resources", dict, {})
            lists += [entry_field(resources, "limits", dict, {}), entry_field(resources, "requests", dict, {})]
    for resources in lists:  # each GPU quantity checked first, so that the error names it
        for name, value in resources.items():
            if is_gpu_resource(name) and not kube.is_valid_quantity(value):
                raise ValueError(f"{name}: {brief(value)} is not a GPU count")
    total = kube.pod_requests({"spec": spec}, keep=is_gpu_resource)
    out = {}
    for name, amount in sorted(total.items()):
        if amount.denominator != 1 or not 0 <= amount <= MAX_GPUS:
            raise ValueError(f"{name}: a request of {brief(str(amount))} is not a GPU count")
        if amount:
            out[name] = int(amount)
    return out


def requested_gpus(pod: Any) -> int:
    """The GPUs the pod holds once placed, or waits for: each MIG instance or replica one."""
    return sum(gpu_requests(pod).values())


def requested_by_kind(pod: Any) -> dict[str, int]:
    """The GPUs the pod holds or waits for by kind (`by_kind`), read from the pod alone, as a
    pending pod that has no node yet says them: its resource names say MIG instances and
    renamed replicas, the product its nodeSelector picks (`gpu_type`) a time-sliced
    nvidia.com/gpu; any other nvidia.com/gpu is a whole GPU."""
    return by_kind(gpu_requests(pod), gpu_type(pod))


def gpu_type(pod: Any) -> str:
    """The GPU product its nodeSelector picks (GPU_PRODUCT_LABEL), "" for none: read from the
    pod, with no node lookup."""
    return entry_field(entry_field(_spec(pod), "nodeSelector", dict, {}), GPU_PRODUCT_LABEL, str, "",
                       max_length=253)


def gpu_shared(requests: dict[str, int], product: str) -> bool:
    """Whether GPUs `requests` (gpu_requests) on nodes of `product` (gpu_type) are time-sliced:
    replicas (SHARED_GPU_RESOURCE), or nvidia.com/gpu of a product named ...-SHARED."""
    return requests.get(SHARED_GPU_RESOURCE, 0) > 0 or (
        product.endswith(SHARED_PRODUCT_SUFFIX) and requests.get(GPU_RESOURCE, 0) > 0)


def _scheduled_condition(pod: Any) -> dict[str, Any] | None:
    status = entry_field(pod, "status", dict, {})
    for cond in entry_objects(status, "conditions"):
        if entry_field(cond, "type", str) == "PodScheduled":
            return cond
    return None


def unschedulable(pod: Any) -> str | None:
    """The scheduler's message while PodScheduled is False (else its reason), None otherwise."""
    cond = _scheduled_condition(pod)
    if cond is None or entry_field(cond, "status", str) != "False":
        return None
    return entry_field(cond, "message", str, max_length=4096) or entry_field(cond, "reason", str) or UNSCHEDULABLE


_NEVER = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class GpuWait:
    """A pod waiting for a GPU: the GPUs it asks for by kind (`requested_by_kind`: what the
    spawner's waiting lines and the service's pages name), since when (None: no time given),
    and its spec.priority (admission sets it from its PriorityClass)."""

    kinds: dict[str, int] = field(hash=False)
    since: dt.datetime | None
    priority: int = 0

    @property
    def gpus(self) -> int:
        """How many GPUs it asks for, each MIG instance or replica one (`requested_gpus`)."""
        return sum(self.kinds.values())

    def queue_key(self, name: str) -> tuple[int, dt.datetime, str]:
        """Its place in the GPU queue, a smaller key first, as kube-scheduler's PrioritySort
        tries pods: the higher priority first, then the longer waiting (ties, common with
        second-precision timestamps, broken by the pod's `name`)."""
        return -self.priority, self.since or _NEVER, name


def gpu_wait(pod: Any) -> GpuWait | None:
    """How the pod waits for a GPU; None when it does not: it is bound, being deleted (the
    scheduler skips it), past Pending, not marked Unschedulable, short of something other
    than a GPU resource, or asks for no GPU."""
    meta, spec = entry_field(pod, "metadata", dict, {}), _spec(pod)
    if meta.get("deletionTimestamp") or spec.get("nodeName"):
        return None
    if entry_field(entry_field(pod, "status", dict, {}), "phase", str, "", max_length=64) not in ("", "Pending"):
        return None
    cond = _scheduled_condition(pod)
    if (cond is None or entry_field(cond, "status", str) != "False"
            or entry_field(cond, "reason", str) != UNSCHEDULABLE
            or not gpu_shortage(entry_field(cond, "message", str, "", max_length=4096))):
        return None
    kinds = requested_by_kind(pod)
    if not kinds:
        return None
    return GpuWait(kinds=kinds, since=entry_time(cond, "lastTransitionTime") or entry_time(meta, "creationTimestamp"),
                   priority=entry_field(spec, "priority", int, 0))


def profile(pod: Any) -> str | None:
    """The profile GPUReclaimSpawner applied (PROFILE_ANNOTATION); None for a plain KubeSpawner's pod."""
    annotations = entry_field(entry_field(pod, "metadata", dict, {}), "annotations", dict, {})
    return entry_field(annotations, PROFILE_ANNOTATION, str, max_length=253)


def keepalive_until(pod: Any) -> dt.datetime | None:
    """The "keep alive until" declared on the spawn form (KEEPALIVE_ANNOTATION); ValueError
    for a malformed one (the user typed it: callers ignore it rather than hold the session)."""
    annotations = entry_field(entry_field(pod, "metadata", dict, {}), "annotations", dict, {})
    value = annotations.get(KEEPALIVE_ANNOTATION)
    return parse_time(value) if isinstance(value, str) else None
