"""GPU readings per pod, built from dcgm-exporter series however they arrive (a direct
scrape of `/metrics` or a Prometheus query): one place that knows the label names."""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..oneline import brief

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.gpu")

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1; the one MIG devices have
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
_KEY = {GPU_UTIL: "util", ENGINE_ACTIVE: "engine", FB_USED: "fb"}  # the field each metric fills


@dataclass(frozen=True)
class GpuReading:
    """One pod's GPUs at time `t`, ordered by the `gpu` label (then the MIG instance).

    `util` is percent (DCGM_FI_DEV_GPU_UTIL, or DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 where
    GPU_UTIL is missing, as on MIG); `None` for a GPU means no value for it.

    `shared`: a GPU of the pod is time-sliced, so its values are the whole device's, not
    the pod's alone (see `shared_devices`)."""

    t: dt.datetime
    gpus: tuple[str, ...]
    util: tuple[float | None, ...]
    fb_used_mib: tuple[float | None, ...]
    shared: bool = False


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
    """A device's key, in the order of the `gpu` label then the MIG instance; its last
    two items (Hostname, UUID) tell the same device in two pods' series apart from
    another node's GPU of the same index."""
    gpu = labels.get("gpu", "")
    instance = labels.get("GPU_I_ID", "")
    order = (int(gpu) if gpu.isdigit() else math.inf, gpu,
             int(instance) if instance.isdigit() else -1)
    return order + (labels.get("Hostname", ""), labels.get("UUID", ""))


# dcgm-exporter's label for a time-sliced replica (with KUBERNETES_VIRTUAL_GPUS: one copy of
# each series per pod sharing the device); only a shared device's series carry it
VGPU = "vgpu"


def shared_devices(devices: Mapping[tuple[str, str], Iterable[tuple]],
                   vgpu: Iterable[tuple[str, str]] = ()) -> set[tuple[str, str]]:
    """The pods (of `devices`: pod -> its device keys) whose GPU is time-sliced: one
    series of theirs carries `vgpu` (the pods in `vgpu`), or one of their devices (the
    same physical GPU or MIG instance) is labelled with another pod too.

    dcgm-exporter's default labels a shared device with one pod only (the last its pod
    mapping saw; dcgm-exporter issue 307): that pod's sharing cannot be seen here, and
    the pods sharing it have no series at all."""
    holders: dict[tuple, set[tuple[str, str]]] = {}
    for pod, keys in devices.items():
        for key in keys:
            if any(key[-2:]):  # without Hostname and UUID, gpu="0" of two nodes would match
                holders.setdefault(key, set()).add(pod)
    shared = set(vgpu)
    for pods in holders.values():
        if len(pods) > 1:
            shared |= pods
    return shared


def _device_name(labels: Mapping[str, str]) -> str:
    gpu = labels.get("gpu", "")
    return f"{gpu}/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID", "") != "" else gpu


# The range of each metric's values (engine activity is a ratio): anything outside, an
# infinity, or not a number is a malformed series, and its GPU has no value.
RANGES = {GPU_UTIL: (0.0, 100.0), ENGINE_ACTIVE: (0.0, 1.0), FB_USED: (0.0, 2.0 ** 40)}


class Series(NamedTuple):
    """One series of an answer as it came: `value` (a number, a string, anything) and `t`,
    its Unix time when the source gives one per series (None: the answer's time)."""

    name: str
    labels: Mapping[str, str]
    value: Any
    t: Any = None


def series_time(t: Any) -> dt.datetime:
    """A series' Unix time; ValueError when it is not one (not a number, NaN, 1e308)."""
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise ValueError(f"the time {brief(t)} is not a number")
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"the time {brief(t)} is out of range") from None


def series_value(name: str, value: Any) -> float | None:
    """The value of a series of metric `name`; None for NaN (no value, as Prometheus
    writes it); ValueError when it is malformed (see RANGES)."""
    if isinstance(value, str) and len(value) <= 40:
        x = float(value)  # ValueError for anything but a number
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            x = float(value)
        except OverflowError:  # an int of 400 digits
            raise ValueError(f"{name}: {brief(value)} is out of range") from None
    else:
        raise ValueError(f"{name}: {type(value).__name__} {brief(value)} is not a number")
    if math.isnan(x):
        return None
    low, high = RANGES[name]
    if not low <= x <= high:
        raise ValueError(f"{name}: {x:g} is outside {low:g}..{high:g}")
    return x


def readings_from_series(series: Iterable[Series], t: dt.datetime, pod_label: PodLabel = "auto"
                         ) -> dict[tuple[str, str], GpuReading]:
    """Group series into one GpuReading per pod, at the newest time of its series (`t`
    for series without one).

    A malformed value (series_value) or time (series_time) leaves its GPU without that
    value, whatever the other series of the GPU say: the GPU's data is missing, and the
    policy holds the session.

    `pod_label` says which labels name the pod holding a GPU: "pod" (a direct scrape, or
    Prometheus with `honor_labels: true`), "exported_pod" (Prometheus with the default
    `honor_labels: false`), or "auto": "exported_pod" when any series of this answer
    carries `exported_pod`, else "pod". (With "auto" and not one GPU allocated, the
    exporter's own pod shows up as a key; it never matches a user's pod. Set the label
    explicitly where that matters.)"""
    series = [Series(*s) for s in series]  # plain (name, labels, value[, t]) tuples too
    if pod_label not in ("auto", "pod", "exported_pod"):
        raise ValueError(f"pod_label must be auto, pod or exported_pod, not {pod_label!r}")
    renamed = (pod_label == "exported_pod" or
               (pod_label == "auto" and any("exported_pod" in s.labels for s in series)))
    devices: dict[tuple[str, str], dict[tuple, dict[str, Any]]] = {}
    times: dict[tuple[str, str], dt.datetime] = {}
    vgpu: set[tuple[str, str]] = set()
    for s in series:
        field = _KEY.get(s.name)
        pod = pod_of(s.labels, renamed) if field else None
        if field is None or pod is None:
            continue
        if s.labels.get(VGPU, ""):
            vgpu.add(pod)
        fields = devices.setdefault(pod, {}).setdefault(_device(s.labels), {"name": _device_name(s.labels)})
        try:
            if s.t is not None:
                at = series_time(s.t)
                times[pod] = max(times.get(pod, at), at)
            value = series_value(s.name, s.value)
        except ValueError as e:
            log.warning("GPU %s of pod %s/%s: %s", fields["name"], pod[0], pod[1], e)
            fields[field] = None  # malformed: this GPU has no such value
            continue
        if value is not None and fields.get(field, 0.0) is not None:
            fields[field] = value * 100.0 if s.name == ENGINE_ACTIVE else value
    shared = shared_devices(devices, vgpu)
    readings = {}
    for pod, by_device in devices.items():
        ordered = [by_device[k] for k in sorted(by_device)]
        readings[pod] = GpuReading(
            t=times.get(pod, t),
            gpus=tuple(str(f["name"]) for f in ordered),
            util=tuple(f.get("util", f.get("engine")) for f in ordered),
            fb_used_mib=tuple(f.get("fb") for f in ordered),
            shared=pod in shared,
        )
    return readings
