"""GPU readings per pod, built from dcgm-exporter series however they arrive (a direct
scrape of `/metrics` or a Prometheus query): the one place that knows the label names and
the reading rules of each exporter version and mode (docs/policy.md, "What the service
reads from each dcgm-exporter"):

- Utilization: DCGM_FI_DEV_GPU_UTIL on a whole GPU (engine activity × 100 where it is
  missing); DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 on a MIG instance, never its GPU_UTIL
  (NVML has none for a MIG device; some versions write 0 there: dcgm-exporter issue 216).
- The holder: `pod`/`namespace`, or each of them renamed `exported_*` where the answer
  carries the renamed label (Prometheus with `honor_labels: false` renames only the labels
  its target also has: a job that labels its target with `namespace` but not `pod` leaves
  `pod` alone).
- KUBERNETES_VIRTUAL_GPUS from 4.8.2 (the `4.5.3-4.8.2` tag): GPU_UTIL and FB_USED are also
  written per process for each pod (with `pod_uid`), next to the device's own unlabelled
  series. That device-level series names no holder, even where Prometheus gave it the
  exporter's own `pod` (`honor_labels: true`). Without `hostPID: true` the exporter cannot
  map processes to pods and writes 0 for every pod: a GPU whose device-level series is
  busy while every pod on it reads 0 has no value (missing data, never idle), and its
  readings say why (`GpuReading.problem`)."""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..oneline import brief

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.gpu")

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1; the one MIG devices have
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
_KEY = {GPU_UTIL: "util", ENGINE_ACTIVE: "engine", FB_USED: "fb"}  # the field each metric fills
# the metrics the exporter writes per process with KUBERNETES_VIRTUAL_GPUS (from 4.8.2),
# their per-pod series carrying POD_UID
PER_PROCESS = (GPU_UTIL, FB_USED)
POD_UID = "pod_uid"
MIG_INSTANCE = "GPU_I_ID"
HOSTNAME = ("Hostname", "hostname")  # the exporter's main renames Hostname (its #655)
NO_HOSTPID = ("dcgm-exporter writes 0 for every pod on this GPU while the GPU itself is busy: "
              "with KUBERNETES_VIRTUAL_GPUS it needs hostPID: true to tell pods' processes apart "
              "(docs/troubleshooting.md); the GPU's values are missing until it has it")


@dataclass(frozen=True)
class GpuReading:
    """One pod's GPUs at time `t`, ordered by the `gpu` label (then the MIG instance).

    `util` is percent (DCGM_FI_DEV_GPU_UTIL, or DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 on a MIG
    instance and where GPU_UTIL is missing); `None` for a GPU means no value for it.

    `shared`: a GPU of the pod is time-sliced, so its values are the whole device's, not
    the pod's alone (see `shared_devices`).

    `problem`: why a GPU has no value although the exporter wrote one (NO_HOSTPID), for
    the session's evidence; None when there is none."""

    t: dt.datetime
    gpus: tuple[str, ...]
    util: tuple[float | None, ...]
    fb_used_mib: tuple[float | None, ...]
    shared: bool = False
    problem: str | None = None


PodLabel = Literal["auto", "pod", "exported_pod"]


def holder_labels(labels: Iterable[Mapping[str, str]], pod_label: PodLabel) -> tuple[str, str]:
    """The labels (pod, namespace) that name the pod holding a GPU in this answer.

    When Prometheus scrapes dcgm-exporter with `honor_labels: false`, each of the
    exporter's labels that the target also has is renamed `exported_<name>`, and the plain
    label then names the exporter's own pod or namespace. "auto" takes, for pod and for
    namespace alike, the renamed label when any series of the answer carries it."""
    if pod_label == "pod":
        return "pod", "namespace"
    if pod_label == "exported_pod":
        return "exported_pod", "exported_namespace"
    seen = set().union(*(s.keys() for s in labels))
    return ("exported_pod" if "exported_pod" in seen else "pod",
            "exported_namespace" if "exported_namespace" in seen else "namespace")


def pod_of(labels: Mapping[str, str], keys: tuple[str, str]) -> tuple[str, str] | None:
    """(namespace, pod) that holds the GPU of a series, read from the labels `keys`
    (holder_labels), or None for an unallocated GPU (Prometheus drops empty labels)."""
    pod, namespace = labels.get(keys[0], ""), labels.get(keys[1], "")
    return (namespace, pod) if pod else None


def _hostname(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in HOSTNAME if labels.get(k)), "")


def _device(labels: Mapping[str, str]) -> tuple:
    """A device's key, in the order of the `gpu` label then the MIG instance; its last
    two items (Hostname, UUID) tell the same device in two pods' series apart from
    another node's GPU of the same index."""
    gpu = labels.get("gpu", "")
    instance = labels.get(MIG_INSTANCE, "")
    order = (int(gpu) if gpu.isdigit() else math.inf, gpu,
             int(instance) if instance.isdigit() else -1)
    return order + (_hostname(labels), labels.get("UUID", ""))


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
    return f"{gpu}/{labels[MIG_INSTANCE]}" if labels.get(MIG_INSTANCE, "") != "" else gpu


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


def device_level(series: Sequence[Series]) -> set[int]:
    """The indexes of the device-level series among per-process ones (KUBERNETES_VIRTUAL_GPUS
    from 4.8.2): a GPU_UTIL or FB_USED series without `pod_uid` on a device whose same metric
    also has per-pod series with it. It names no holder, whatever its `pod` label says."""
    per_pod = {(s.name, _device(s.labels)) for s in series if s.name in PER_PROCESS and s.labels.get(POD_UID)}
    return {i for i, s in enumerate(series)
            if s.name in PER_PROCESS and not s.labels.get(POD_UID) and (s.name, _device(s.labels)) in per_pod}


def _util(fields: Mapping[str, Any], mig: bool) -> float | None:
    """A GPU's utilization in percent by the rules above (None: no value)."""
    if mig:
        return fields.get("engine")
    return fields.get("util", fields.get("engine"))


def readings_from_series(series: Iterable[Series], t: dt.datetime, pod_label: PodLabel = "auto"
                         ) -> dict[tuple[str, str], GpuReading]:
    """Group series into one GpuReading per pod, at the newest time of its series (`t`
    for series without one), by the rules of the module's docstring.

    A malformed value (series_value) or time (series_time) leaves its GPU without that
    value, whatever the other series of the GPU say: the GPU's data is missing, and the
    policy holds the session.

    `pod_label` says which labels name the pod holding a GPU: "pod" (a direct scrape, or
    Prometheus with `honor_labels: true`), "exported_pod" (Prometheus with the default
    `honor_labels: false` on a target labelled with pod and namespace), or "auto" (see
    holder_labels). (With "auto" and not one GPU allocated, the exporter's own pod shows
    up as a key; it never matches a user's pod. Set the label explicitly where that
    matters.)"""
    series = [Series(*s) for s in series]  # plain (name, labels, value[, t]) tuples too
    if pod_label not in ("auto", "pod", "exported_pod"):
        raise ValueError(f"pod_label must be auto, pod or exported_pod, not {pod_label!r}")
    keys = holder_labels((s.labels for s in series), pod_label)
    whole_device = device_level(series)
    devices: dict[tuple[str, str], dict[tuple, dict[str, Any]]] = {}
    busy_devices: set[tuple] = set()  # the device-level series show work
    per_pod_busy: set[tuple] = set()  # a pod's per-process series shows work
    per_process: set[tuple] = set()
    times: dict[tuple[str, str], dt.datetime] = {}
    vgpu: set[tuple[str, str]] = set()
    for i, s in enumerate(series):
        field = _KEY.get(s.name)
        if field is None:
            continue
        key = _device(s.labels)
        pod = None if i in whole_device else pod_of(s.labels, keys)
        if pod is None:
            if s.name == GPU_UTIL and _number(s) > 0:
                busy_devices.add(key)
            continue
        if s.name in PER_PROCESS and s.labels.get(POD_UID):
            per_process.add(key)
            if _number(s) > 0:
                per_pod_busy.add(key)
        if s.labels.get(VGPU, ""):
            vgpu.add(pod)
        fields = devices.setdefault(pod, {}).setdefault(key, {"name": _device_name(s.labels),
                                                              "mig": s.labels.get(MIG_INSTANCE, "") != ""})
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
    blind = (per_process & busy_devices) - per_pod_busy  # every pod reads 0 on a busy GPU
    shared = shared_devices(devices, vgpu)
    readings = {}
    for pod, by_device in devices.items():
        ordered = sorted(by_device)
        values = [by_device[k] for k in ordered]
        unseen = [k in blind for k in ordered]
        readings[pod] = GpuReading(
            t=times.get(pod, t),
            gpus=tuple(str(f["name"]) for f in values),
            util=tuple(None if u else _util(f, f["mig"]) for f, u in zip(values, unseen, strict=True)),
            fb_used_mib=tuple(None if u else f.get("fb") for f, u in zip(values, unseen, strict=True)),
            shared=pod in shared,
            problem=NO_HOSTPID if any(unseen) else None,
        )
    return readings


def _number(s: Series) -> float:
    """A series' value for the checks across series (0 for anything unreadable: those
    checks never make a value out of a malformed one)."""
    try:
        return series_value(s.name, s.value) or 0.0
    except ValueError:
        return 0.0
