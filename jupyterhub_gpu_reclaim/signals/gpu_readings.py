"""GPU readings per pod, built from dcgm-exporter series however they arrive (a direct
scrape of `/metrics` or a Prometheus query): one place that knows the label names."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1; the one MIG devices have
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB


@dataclass(frozen=True)
class GpuReading:
    """One pod's GPUs at time `t`, ordered by the `gpu` label (then the MIG instance).

    `util` is percent (DCGM_FI_DEV_GPU_UTIL, or DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 where
    GPU_UTIL is missing, as on MIG); `None` for a GPU means no value for it."""

    t: dt.datetime
    gpus: tuple[str, ...]
    util: tuple[float | None, ...]
    fb_used_mib: tuple[float | None, ...]


PodLabel = Literal["auto", "pod", "exported_pod"]


def pod_of(labels: Mapping[str, str], renamed: bool) -> tuple[str, str] | None:
    """(namespace, pod) that holds the GPU of a series, or None for an unallocated GPU.

    When Prometheus scrapes dcgm-exporter with `honor_labels: false`, the exporter's own
    `pod`/`namespace` become `exported_pod`/`exported_namespace`, and `pod` then names the
    exporter's pod. With `renamed`, only `exported_*` name the holder; a series without
    them (Prometheus drops empty labels) is an unallocated GPU."""
    if renamed:
        pod, namespace = labels.get("exported_pod", ""), labels.get("exported_namespace", "")
    else:
        pod, namespace = labels.get("pod", ""), labels.get("namespace", "")
    return (namespace, pod) if pod else None


def _device(labels: Mapping[str, str]) -> tuple:
    gpu = labels.get("gpu", "")
    instance = labels.get("GPU_I_ID", "")
    order = (int(gpu) if gpu.isdigit() else math.inf, gpu,
             int(instance) if instance.isdigit() else -1)
    return order + (labels.get("Hostname", ""), labels.get("UUID", ""))


def _device_name(labels: Mapping[str, str]) -> str:
    gpu = labels.get("gpu", "")
    return f"{gpu}/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID", "") != "" else gpu


def readings_from_series(series: Iterable[tuple[str, Mapping[str, str], float]],
                         t: dt.datetime, pod_label: PodLabel = "auto"
                         ) -> dict[tuple[str, str], GpuReading]:
    """Group (metric name, labels, value) series into one GpuReading per pod.

    `pod_label` says which labels name the pod holding a GPU: "pod" (a direct scrape, or
    Prometheus with `honor_labels: true`), "exported_pod" (Prometheus with the default
    `honor_labels: false`), or "auto": "exported_pod" when any series of this answer
    carries `exported_pod`, else "pod". (With "auto" and not one GPU allocated, the
    exporter's own pod shows up as a key; it never matches a user's pod. Set the label
    explicitly where that matters.)"""
    series = list(series)
    if pod_label not in ("auto", "pod", "exported_pod"):
        raise ValueError(f"pod_label must be auto, pod or exported_pod, not {pod_label!r}")
    renamed = (pod_label == "exported_pod" or
               (pod_label == "auto" and any("exported_pod" in labels for _, labels, _ in series)))
    devices: dict[tuple[str, str], dict[tuple, dict[str, float | str]]] = {}
    for name, labels, value in series:
        if name not in (GPU_UTIL, ENGINE_ACTIVE, FB_USED):
            continue
        pod = pod_of(labels, renamed)
        if pod is None:
            continue
        fields = devices.setdefault(pod, {}).setdefault(_device(labels), {"name": _device_name(labels)})
        if value is None or math.isnan(value):
            continue
        if name == GPU_UTIL:
            fields["util"] = float(value)
        elif name == ENGINE_ACTIVE:
            fields["engine"] = float(value) * 100.0
        else:
            fields["fb"] = float(value)
    readings = {}
    for pod, by_device in devices.items():
        ordered = [by_device[k] for k in sorted(by_device)]
        readings[pod] = GpuReading(
            t=t,
            gpus=tuple(str(f["name"]) for f in ordered),
            util=tuple(f.get("util", f.get("engine")) for f in ordered),  # type: ignore[misc]
            fb_used_mib=tuple(f.get("fb") for f in ordered),  # type: ignore[misc]
        )
    return readings
