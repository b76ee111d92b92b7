"""Two days of a small GPU hub's history, written as dcgm-exporter and kube-state-metrics
write their series and as Prometheus stores them after a scrape, in each label scheme the
report reads (`SCHEMES`), and the truth of each session (`SESSIONS`) for the report's tests to
compute the figures from on their own.

The exporter's series: `gpu, UUID, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION`
(`GPU_I_PROFILE, GPU_I_ID` on a MIG instance), then `container, namespace, pod` of the pod
holding the device (none on a free one, as 3.3.4 and later write it); with
KUBERNETES_VIRTUAL_GPUS (4.8.2) GPU_UTIL per process with `pod_uid` next to the device's own
unlabelled series; a time-sliced replica with `vgpu`. Scraped by a ServiceMonitor: the target's
`namespace, pod, container, service, endpoint` are added, each exporter label of those names
renamed `exported_*` with honorLabels false and kept with true (the target's filling in the
ones the series lacks). kube-state-metrics: kube_pod_labels with every label as `label_*` (1.9)
or only the allow-listed ones (2.x, with kube_pod_annotations of the allow-listed profile
annotation), kube_pod_status_phase, kube_pod_status_scheduled and kube_pod_status_unschedulable (a pod that
waited for a GPU), kube_pod_container_resource_requests."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .prometheus_history import end_file, write_family

HOUR = 3600
SCRAPE_S = 30
OFFSET_S = 7  # samples off the minute, so no sample sits on a step's edge


@dataclass(frozen=True)
class Device:
    host: str
    gpu: str
    uuid: str
    mig: str = ""  # GPU_I_ID
    mode: str = "full"  # full, mig, virtual, vgpu


@dataclass(frozen=True)
class Session:
    """A pod holding `device` from `start` to `end` hours after the history's start; `util(h)`
    its true utilization in percent at hour h (engine activity × 100 on MIG)."""

    pod: str
    user: str  # "" for a pod that is no hub user's
    device: Device
    start: float
    end: float
    util: Callable[[float], float]
    profile: str = ""
    namespace: str = "jhub"
    pending: tuple[float, float] | None = None  # hours Pending before it ran
    gpus_requested: int = 1
    unschedulable: float = 0.0  # hours of its Pending that no node had a GPU for (then its image pulled)


NODE_A = [Device("node-a", str(i), f"GPU-a{i}000000-0000-0000-0000-000000000000") for i in range(3)]
MIG = Device("node-b", "0", "GPU-b0000000-0000-0000-0000-000000000000", mig="7", mode="mig")
MIG_FREE = Device("node-b", "0", "GPU-b0000000-0000-0000-0000-000000000000", mig="8", mode="mig")
VIRTUAL = Device("node-c", "0", "GPU-c0000000-0000-0000-0000-000000000000", mode="virtual")
SLICED = Device("node-c", "1", "GPU-c1000000-0000-0000-0000-000000000000", mode="vgpu")

SESSIONS = [
    Session("jupyter-alice", "alice", NODE_A[0], 8, 18, lambda h: 80.0 if h < 10 else 0.0, profile="a100"),
    Session("jupyter-bob", "bob", NODE_A[1], 20, 28, lambda h: 0.5, profile="a100"),  # never used, over midnight
    Session("training-job-1", "", NODE_A[2], 0, 2, lambda h: 95.0, namespace="ml"),
    Session("jupyter-carol", "carol", MIG, 12, 16, lambda h: 87.0 if h < 13 else 0.02 if h < 13.5 else 50.0),
    Session("jupyter-dave", "dave", VIRTUAL, 24, 30, lambda h: 50.0 if h < 25 else 0.0 if h < 28 else 60.0,
            profile="a100"),
    Session("jupyter-erin", "erin", SLICED, 2, 4, lambda h: 40.0, profile="shared"),
    Session("jupyter-grace", "grace", NODE_A[0], 18 + 1 / 6, 20, lambda h: 90.0, profile="a100", pending=(17, 18 + 1 / 6),
            unschedulable=1),
    Session("jupyter-henry", "henry", NODE_A[2], 9.25, 9.25, lambda h: 0.0, pending=(9, 9.25), gpus_requested=0),
]
HOURS = 48


@dataclass(frozen=True)
class Scheme:
    honor_labels: bool
    ksm: str  # "1.9": every pod label; "2": only the allow-listed ones, and the profile annotation


SCHEMES = {"honorlabels-false_ksm-1.9": Scheme(False, "1.9"), "honorlabels-true_ksm-2": Scheme(True, "2")}
EXPORTER_TARGET = {"namespace": "gpu-operator", "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter",
                   "endpoint": "gpu-metrics", "job": "nvidia-dcgm-exporter"}
KSM_TARGET = {"namespace": "monitoring", "pod": "kube-state-metrics-7d9f", "container": "kube-state-metrics",
              "service": "kube-state-metrics", "endpoint": "http", "job": "kube-state-metrics",
              "instance": "10.0.0.9:8080"}


def times(start: float, begin_h: float, end_h: float) -> Iterator[float]:
    """The scrape times in [begin_h, end_h) hours after `start`."""
    k = int(begin_h * HOUR // SCRAPE_S)
    while True:
        t = k * SCRAPE_S + OFFSET_S
        if t >= end_h * HOUR:
            return
        if t >= begin_h * HOUR:
            yield start + t
        k += 1


def scraped(own: dict[str, str], target: dict[str, str], honor: bool) -> dict[str, str]:
    """A series' labels as Prometheus stores them after scraping `target`."""
    out = dict(own)
    for k, v in target.items():
        if k in own and own[k] != "":
            if not honor:
                out[f"exported_{k}"] = out.pop(k)
                out[k] = v
        else:
            out[k] = v
    return out


def device_labels(d: Device) -> dict[str, str]:
    labels = {"gpu": d.gpu, "UUID": d.uuid, "device": f"nvidia{d.gpu}", "modelName": "NVIDIA A100-SXM4-40GB"}
    if d.mig:
        labels |= {"GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": d.mig}
    return labels | {"Hostname": d.host, "DCGM_FI_DRIVER_VERSION": "535.129.03"}


def exporter_target(d: Device) -> dict[str, str]:
    return EXPORTER_TARGET | {"pod": f"nvidia-dcgm-exporter-{d.host}", "instance": f"{d.host}:9400"}


def dcgm_series(start: float, scheme: Scheme) -> dict[str, list]:
    """{metric: [(labels, points)]} of every device."""
    out: dict[str, list] = {"DCGM_FI_DEV_GPU_UTIL": [], "DCGM_FI_PROF_GR_ENGINE_ACTIVE": []}

    def add(metric: str, d: Device, holder: dict[str, str], points: list) -> None:
        out[metric].append((scraped(device_labels(d) | holder, exporter_target(d), scheme.honor_labels), points))

    for s in SESSIONS:
        if s.end <= s.start:
            continue
        d = s.device
        holder = {"container": "notebook", "namespace": s.namespace, "pod": s.pod}
        ts = list(times(start, s.start, s.end))
        util = [(t, s.util((t - start) / HOUR)) for t in ts]
        if d.mode == "mig":  # GPU_UTIL 0 on every MIG instance (dcgm-exporter issue 216)
            add("DCGM_FI_DEV_GPU_UTIL", d, holder, [(t, 0.0) for t in ts])
            add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", d, holder, [(t, u / 100) for t, u in util])
        elif d.mode == "virtual":  # per process with pod_uid, and the device's own series
            add("DCGM_FI_DEV_GPU_UTIL", d, holder | {"pod_uid": f"uid-{s.pod}"}, util)
            add("DCGM_FI_DEV_GPU_UTIL", d, {}, util)
        else:
            extra = {"vgpu": "0"} if d.mode == "vgpu" else {}
            add("DCGM_FI_DEV_GPU_UTIL", d, holder | extra, util)
            add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", d, holder | extra, [(t, u / 100) for t, u in util])
    free = list(times(start, 0, HOURS))  # a free MIG instance all along: no pod labels
    add("DCGM_FI_DEV_GPU_UTIL", MIG_FREE, {}, [(t, 0.0) for t in free])
    add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MIG_FREE, {}, [(t, 0.0002) for t in free])
    return out


def _pod_labels(s: Session, scheme: Scheme) -> dict[str, str]:
    own = {"namespace": s.namespace, "pod": s.pod, "uid": f"uid-{s.pod}"}
    if scheme.ksm == "1.9":
        if s.user:
            own |= {"label_app": "jupyterhub", "label_chart": "jupyterhub-4.0.0", "label_component": "singleuser-server",
                    "label_heritage": "jupyterhub", "label_hub_jupyter_org_network_access_hub": "true",
                    "label_hub_jupyter_org_username": s.user, "label_release": "jhub"}
        else:
            own |= {"label_app": "trainer", "label_component": "batch"}
    elif s.user:
        own |= {"label_hub_jupyter_org_username": s.user}
    return own


def ksm_series(start: float, scheme: Scheme) -> dict[str, list]:
    out: dict[str, list] = {"kube_pod_labels": [], "kube_pod_annotations": [], "kube_pod_status_phase": [],
                            "kube_pod_status_scheduled": [], "kube_pod_status_unschedulable": [],
                            "kube_pod_container_resource_requests": []}
    for s in SESSIONS:
        begin = s.pending[0] if s.pending else s.start
        life = list(times(start, begin, max(s.end, begin)))
        if not life:
            continue
        base = {"namespace": s.namespace, "pod": s.pod, "uid": f"uid-{s.pod}"}

        def add(metric: str, own: dict[str, str], points: list) -> None:
            out[metric].append((scraped(own, KSM_TARGET, scheme.honor_labels), points))

        add("kube_pod_labels", _pod_labels(s, scheme), [(t, 1.0) for t in life])
        if scheme.ksm == "2" and s.profile:
            add("kube_pod_annotations", base | {"annotation_jupyterhub_gpu_reclaim_profile": s.profile},
                [(t, 1.0) for t in life])
        pending_until = start + (s.pending[1] if s.pending else s.start) * HOUR
        for phase in ("Pending", "Running"):
            add("kube_pod_status_phase", base | {"phase": phase},
                [(t, float((t < pending_until) == (phase == "Pending"))) for t in life])
        if s.unschedulable and s.pending:
            scheduled_at = start + (s.pending[0] + s.unschedulable) * HOUR
            for condition in ("true", "false"):
                add("kube_pod_status_scheduled", base | {"condition": condition},
                    [(t, float((t < scheduled_at) == (condition == "false"))) for t in life])
            add("kube_pod_status_unschedulable", base, [(t, 1.0) for t in life if t < scheduled_at])
        resource = {"container": "notebook", "node": s.device.host, "unit": "integer"}
        if s.gpus_requested:
            name = "nvidia_com_mig_1g_5gb" if s.device.mode == "mig" else "nvidia_com_gpu"
            add("kube_pod_container_resource_requests", base | resource | {"resource": name},
                [(t, float(s.gpus_requested)) for t in life])
        add("kube_pod_container_resource_requests", base | resource | {"resource": "cpu", "unit": "core"},
            [(t, 0.5) for t in life])
    return out


def write_history(out: IO[str], start: float, scheme: Scheme) -> None:
    for metric, series in (dcgm_series(start, scheme) | ksm_series(start, scheme)).items():
        write_family(out, metric, series)
    end_file(out)


def history_file(folder: Path, start: float, scheme: Scheme) -> Path:
    path = folder / "history.om"
    with open(path, "w") as out:
        write_history(out, start, scheme)
    return path


def step_states(start: float, step: int, n: int) -> dict[str, list[str]]:
    """Each session's state at each step of the grid from `start`: "used" (its true
    utilization reached 1% in the step's minute), "idle", or "" (no sample in the step)."""
    out: dict[str, list[str]] = {}
    for s in SESSIONS:
        if s.end <= s.start:
            continue
        states = out.setdefault(s.pod, [""] * n)
        for t in times(start, s.start, s.end):
            i = int((t - start) // step) + 1  # the step whose window (t_i - step, t_i] holds t
            if i < n:
                used = s.util((t - start) / HOUR) >= 1.0
                states[i] = "used" if used or states[i] == "used" else "idle"
    return out


def history_rows(start: float, step: int, n: int, scheme: Scheme) -> dict[tuple[str, str, str], dict[str, float]]:
    """(day, user, profile) -> GPU-hours over the `n` steps from `start`, from the sessions'
    samples (`step_states`). A time-sliced GPU and a pod that is no hub user's count as they
    are seen; profiles only where kube-state-metrics writes the annotation (its 2.x
    allow-list); idle in stretches of 2 h or more."""
    states = step_states(start, step, n)
    long_steps = 2 * HOUR // step
    rows: dict[tuple[str, str, str], dict[str, float]] = {}
    for s in SESSIONS:
        line = states.get(s.pod)
        if line is None:
            continue
        user = s.user or "(not a hub user's pod)"
        profile = s.profile if scheme.ksm == "2" and s.profile else "(profile unknown)"
        long_idle = set()
        text = "".join({"idle": "i", "used": "u", "": "."}[x] for x in line)
        for m in re.finditer("i{%d,}" % long_steps, text):
            long_idle |= set(range(m.start(), m.end()))
        for i, state in enumerate(line):
            if not state:
                continue
            # the step at t reads (t - step, t]: it counts on the day its time begins
            day = dt.datetime.fromtimestamp(start + (i - 1) * step, dt.timezone.utc).date().isoformat()
            row = rows.setdefault((day, user, profile),
                                  {"held": 0.0, "used": 0.0, "idle": 0.0, "no_reading": 0.0, "idle_long": 0.0})
            row["held"] += step / HOUR
            row[state] += step / HOUR
            row["idle_long"] += step / HOUR if i in long_idle else 0.0
    return {k: {f: round(v, 2) for f, v in row.items()} for k, row in rows.items()}
