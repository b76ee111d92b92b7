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
from ..signals.pod_facts import PROFILE_ANNOTATION, SERVER_KEY, USER_KEY

# z2jh's pod labels (KubeSpawner's), as kube-state-metrics names them
USERNAME = USER_KEY
SERVERNAME = SERVER_KEY
COMPONENT = "component"
SINGLEUSER = "singleuser-server"
GPU_RESOURCES = "nvidia_com_.+"  # nvidia.com/gpu, MIG profiles (nvidia.com/mig-1g.5gb), shared GPUs, sanitized
PENDING = "Pending"
READ_FIELDS = {"util": GPU_UTIL, "engine": ENGINE_ACTIVE}  # the fields the report reads


def ksm_name(prefix: str, key: str) -> str:
    """kube-state-metrics' name for a Kubernetes label or annotation key: `label_` or
    `annotation_` and the key with every character outside [a-zA-Z0-9_] an underscore."""
    return f"{prefix}_{re.sub(r'[^a-zA-Z0-9_]', '_', key)}"


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


PENDING_SELECTOR = f'kube_pod_status_phase{{phase="{PENDING}"}}'


def gpu_requests_query(window_s: int) -> str:
    """The GPUs each pod asked for (all containers), seen in the window."""
    return ("sum by (namespace, pod, exported_namespace, exported_pod) (last_over_time("
            f'kube_pod_container_resource_requests{{resource=~"{GPU_RESOURCES}"}}[{_step(window_s)}]))')


def pending_query(step_s: int) -> str:
    """The pods Pending at each step (1 when Pending at any time in the step)."""
    return f'max_over_time({PENDING_SELECTOR}[{_step(step_s)}]) == 1'
