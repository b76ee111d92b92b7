"""The report's PromQL, each query at the report's step: range queries of `max_over_time` over
one step (a step counts as used when any sample in it was: the report errs toward keeping).

The GPU queries read the metrics of the service's own query (signals.prometheus: the fields
util and engine), each taken at the step; the memory field is left out, as the report counts
no memory. kube-state-metrics' series are read in both of its label
styles: v1 writes every pod label as `label_<name>`, v2 only the allow-listed ones
(`--metric-labels-allowlist=pods=[hub.jupyter.org/username,...]`), named the same way; the
annotation of the profile only when allow-listed (`--metric-annotations-allowlist`)."""

from __future__ import annotations

import re

from ..signals.gpu_readings import ENGINE_ACTIVE, GPU_UTIL
from ..signals.pod_facts import (PROFILE_ANNOTATION, SERVER_KEY, USER_KEY, gpu_resource_pattern,
                                 replica_resource_pattern)

# z2jh's pod labels (KubeSpawner's), as kube-state-metrics names them
USERNAME = USER_KEY
SERVERNAME = SERVER_KEY
COMPONENT = "component"
SINGLEUSER = "singleuser-server"
PENDING = "Pending"
READ_FIELDS = {"util": GPU_UTIL, "engine": ENGINE_ACTIVE}  # the fields the report reads


def ksm_spelling(name: str) -> str:
    """A Kubernetes name as kube-state-metrics writes it in a label's name or value (a
    resource: nvidia_com_gpu): every character outside [a-zA-Z0-9_] an underscore."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def ksm_name(prefix: str, key: str) -> str:
    """kube-state-metrics' name for a Kubernetes label or annotation key: `label_` or
    `annotation_` and the key as it spells it."""
    return f"{prefix}_{ksm_spelling(key)}"


# what a GPU is, as the service reads a pod (pod_facts), in kube-state-metrics' spelling
GPU_RESOURCES = gpu_resource_pattern(ksm_spelling)


USER_LABEL = ksm_name("label", USERNAME)
SERVER_LABEL = ksm_name("label", SERVERNAME)
COMPONENT_LABEL = ksm_name("label", COMPONENT)
PROFILE_LABEL = ksm_name("annotation", PROFILE_ANNOTATION)


def _step(step_s: int) -> str:
    return f"{int(step_s)}s"


def gpu_queries(step_s: int, matchers: str = "") -> dict[str, str]:
    """The GPU readings at each step, one query a metric (the field gpu_readings reads it
    as: signals.prometheus's `field` label): the metric's `max_over_time` over the step, each
    series with all its labels. Not the service's `max by (...)` query: an aggregation at
    every step of a range costs Prometheus 2.42 some 30 times the selection itself."""
    selector = f"{{{matchers}}}" if matchers else ""
    return {field: f"max_over_time({name}{selector}[{_step(step_s)}])" for field, name in READ_FIELDS.items()}


def gpu_selector(matchers: str = "") -> list[str]:
    """Series selectors of the GPU metrics (for /api/v1/series: how many a page holds)."""
    selector = f"{{{matchers}}}" if matchers else ""
    return [f"{name}{selector}" for name in READ_FIELDS.values()]


def user_pods_selector() -> str:
    """The pods of hub users (for /api/v1/series: labels from the index, no samples)."""
    return f'kube_pod_labels{{{USER_LABEL}!=""}}'


def profiles_selector() -> str:
    return f'kube_pod_annotations{{{PROFILE_LABEL}!=""}}'


RUNNING = "Running"
PHASES_SELECTOR = f'kube_pod_status_phase{{phase=~"{PENDING}|{RUNNING}"}}'
GPU_REQUESTS = f'kube_pod_container_resource_requests{{resource=~"{GPU_RESOURCES}"}}'
# a GPU asked for as a share: time-slicing's renamed resource (nvidia.com/gpu.shared, nvidia.com/mig-1g.5gb.shared)
SHARED_REQUESTS = f'kube_pod_container_resource_requests{{resource=~"{replica_resource_pattern(ksm_spelling)}"}}'
UNSCHEDULABLE = "kube_pod_status_unschedulable"
# kube-state-metrics names the pod with these (exported_* where Prometheus renamed them)
POD_KEYS = "namespace, pod, exported_namespace, exported_pod"


def _over(selector: str, step_s: int, offset: str) -> str:
    return f"max_over_time({selector}[{_step(step_s)}]{offset})"


# The stretches runs.py reads (each a query of the offset its range selectors take: a step when
# it is there, read at the step before and after to find where each stretch begins and ends)
def phases(step_s: int, offset: str) -> str:
    """The pods Pending and Running (any time in the step), a series each phase: one query,
    as kube-state-metrics writes each phase of every pod (0 but the pod's own)."""
    return f"{_over(PHASES_SELECTOR, step_s, offset)} == 1"


def unschedulable(step_s: int, offset: str) -> str:
    """The pods the scheduler found no node for (no free GPU): waiting for a GPU, not starting
    (kube-state-metrics writes the series for those pods only; kube_pod_status_scheduled's
    condition="false", the same fact, has a series for every pod)."""
    return f"{_over(UNSCHEDULABLE, step_s, offset)} == 1"


def profiles(step_s: int, offset: str) -> str:
    """Each pod's profile annotation (a series each profile, and each pod's uid in kube-state-metrics 2)."""
    return _over(profiles_selector(), step_s, offset)


def gpu_requests(step_s: int, offset: str) -> str:
    """Each container's GPU request, a series as kube-state-metrics writes it (runs.asked adds
    them up per pod instance: an aggregation at every step of a month cost Prometheus some
    100 s of CPU against some 15 for the selection)."""
    return _over(GPU_REQUESTS, step_s, offset)


def shared_requests(step_s: int, offset: str) -> str:
    """The pods asking for a shared GPU."""
    return _over(SHARED_REQUESTS, step_s, offset)
