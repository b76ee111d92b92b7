"""A day of a GPU hub's history with the mess real clusters write (issue 36), as dcgm-exporter
and kube-state-metrics 2 write it and a scrape stores it (each label scheme of
report_history.SCHEMES' honorLabels), and the samples it wrote, for the tests to count from:

- z2jh's pod name `jupyter-alice` used by three sessions with two profiles, on two GPUs;
- pods that wait for a GPU (unschedulable) and then start (scheduled, Pending while the image
  is pulled), one under a reused name that asked for 2 GPUs and was deleted while it waited, with the GPU request series gaining `node` once scheduled, one whose request
  series changes `instance` when kube-state-metrics restarts, and pods that only start;
- an exporter outage of 30 min while kube-state-metrics shows the pod Running;
- a GPU handed over within a step (the last sample of one pod and the first of the next in
  one minute), free before and after (with honorLabels true a free GPU's series carries the
  exporter's own pod);
- a pod on a time-sliced GPU that says so only by the resource it asked for
  (`nvidia.com/gpu.shared`), the exporter naming it alone on its device;
- a pod running over the report's midnight."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

from .prometheus_history import end_file, write_family
from .report_history import HOUR, KSM_TARGET, OFFSET_S, SCRAPE_S, Device, Scheme, scraped, device_labels, exporter_target

HOURS = 26  # the history; the tests' report ends at 24 h
NODE_X = [Device("node-x", str(i), f"GPU-x{i}000000-0000-0000-0000-000000000000") for i in range(4)]
NODE_Y = Device("node-y", "0", "GPU-y0000000-0000-0000-0000-000000000000")  # its exporter goes away for 30 min
SLICED = Device("node-z", "0", "GPU-z0000000-0000-0000-0000-000000000000")


@dataclass(frozen=True)
class Wait:
    start: float
    end: float
    unschedulable: bool  # waiting for a GPU; else starting (scheduled: image pull, container start)


@dataclass(frozen=True)
class Pod:
    """One pod instance: Pending in `waits`, then Running from `run[0]` to `run[1]` hours on
    `device`, its utilization `util(h)` in percent."""

    name: str
    uid: str
    user: str
    device: Device
    run: tuple[float, float]
    util: Callable[[float], float]
    profile: str = ""
    waits: tuple[Wait, ...] = ()
    outage: tuple[float, float] | None = None  # no exporter sample in it; kube-state-metrics goes on
    resource: str = "nvidia_com_gpu"
    ksm_restart: float | None = None  # kube-state-metrics restarted: its series' `instance` changes then
    gpus: int = 1  # asked for

    @property
    def begins(self) -> float:
        return self.waits[0].start if self.waits else self.run[0]


def _used(h: float) -> float:
    return 80.0


def _idle(h: float) -> float:
    return 0.3


PODS = [
    # one pod name, three sessions, two profiles (kube-state-metrics 2: a uid each)
    Pod("jupyter-alice", "uid-alice-1", "alice", NODE_X[0], (1, 3), _used, profile="small"),
    Pod("jupyter-alice", "uid-alice-2", "alice", NODE_X[1], (4, 7), _idle, profile="large"),
    Pod("jupyter-alice", "uid-alice-3", "alice", NODE_X[0], (8, 9), _used, profile="small"),
    # waits for a GPU 1 h, then 15 min starting; its request series gains `node` once scheduled
    Pod("jupyter-bob", "uid-bob", "bob", NODE_X[2], (11.25, 13), _used, profile="small",
        waits=(Wait(10, 11, True), Wait(11, 11.25, False))),
    # the same name again, 2 GPUs asked for: waits for them 1 h, and is deleted still waiting
    Pod("jupyter-bob", "uid-bob-2", "bob", NODE_X[2], (20, 20), _used, profile="large", gpus=2,
        waits=(Wait(19, 20, True),)),
    # waits 30 min; kube-state-metrics restarts meanwhile (`instance` changes)
    Pod("jupyter-carol", "uid-carol", "carol", NODE_X[2], (14.5, 16), _used, profile="small",
        waits=(Wait(14, 14.5, True),), ksm_restart=14.25),
    # the exporter of node-y unreachable 14:00-14:30 while the pod runs
    Pod("jupyter-dave", "uid-dave", "dave", NODE_Y, (12, 18), _used, profile="large", outage=(14, 14.5)),
    # handed over within a step: erin's last sample at 05:00:07, frank's first at 05:00:37; the
    # GPU free until 02:00:20 and after 09:00:30 (a free sample in erin's first and after
    # frank's last step)
    Pod("jupyter-erin", "uid-erin", "erin", NODE_X[3], (2 + 20 / HOUR, 5 + 30 / HOUR), lambda h: 80.0 if h < 2.5 else 0.3,
        profile="small"),
    Pod("jupyter-frank", "uid-frank", "frank", NODE_X[3], (5 + 30 / HOUR, 9 + 30 / HOUR), _idle, profile="small",
        waits=(Wait(4.5, 5 + 30 / HOUR, True),)),
    # a time-sliced GPU: only the resource asked for says so
    Pod("jupyter-gina", "uid-gina", "gina", SLICED, (1, 4), _idle, profile="shared", resource="nvidia_com_gpu_shared"),
    # only starting: scheduled at once, Pending while the image is pulled
    Pod("jupyter-henry", "uid-henry", "henry", NODE_X[1], (16 + 5 / 60, 17), _used, waits=(Wait(16, 16 + 5 / 60, False),),
        profile="small"),
    Pod("jupyter-ivan", "uid-ivan", "ivan", NODE_X[0], (17 + 3 / 60, 18), _used, waits=(Wait(17, 17 + 3 / 60, False),),
        profile="small"),
    # over the report's midnight
    Pod("jupyter-kim", "uid-kim", "kim", NODE_X[1], (22, 26), _used, profile="large"),
]


def times(start: float, begin_h: float, end_h: float) -> Iterator[float]:
    """The scrape times in [begin_h, end_h) hours after `start`."""
    k = int(begin_h * HOUR // SCRAPE_S)
    while (t := k * SCRAPE_S + OFFSET_S) < end_h * HOUR:
        if t >= begin_h * HOUR:
            yield start + t
        k += 1


def exporter_times(start: float, pod: Pod) -> list[float]:
    """When the exporter's series named the pod."""
    a, b = pod.outage or (0, 0)
    return [t for t in times(start, *pod.run) if not a * HOUR <= t - start < b * HOUR]


def _free_times(start: float, d: Device, pods: list[Pod], hours: float) -> list[float]:
    held = {t for p in pods if p.device == d for t in times(start, *p.run)}
    return [t for t in times(start, 0, hours) if t not in held]


def write_history(out: IO[str], start: float, scheme: Scheme, pods: list[Pod] = PODS, hours: float = HOURS) -> None:
    """The history of `pods` (PODS unless given) over `hours` hours from `start`."""
    dcgm: dict[str, list] = {"DCGM_FI_DEV_GPU_UTIL": [], "DCGM_FI_PROF_GR_ENGINE_ACTIVE": []}

    def exporter(d: Device, holder: dict[str, str], points: list) -> None:
        labels = scraped(device_labels(d) | holder, exporter_target(d), scheme.honor_labels)
        dcgm["DCGM_FI_DEV_GPU_UTIL"].append((labels, points))
        dcgm["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append((labels, [(t, u / 100) for t, u in points]))

    for p in pods:
        exporter(p.device, {"container": "notebook", "namespace": "jhub", "pod": p.name},
                 [(t, p.util((t - start) / HOUR)) for t in exporter_times(start, p)])
    for d in sorted({p.device for p in pods}, key=lambda d: d.uuid):  # a free GPU: no pod of the exporter's own
        exporter(d, {}, [(t, 0.0) for t in _free_times(start, d, pods, hours)])
    ksm: dict[str, list] = {m: [] for m in ("kube_pod_labels", "kube_pod_annotations", "kube_pod_status_phase",
                                            "kube_pod_status_scheduled", "kube_pod_status_unschedulable",
                                            "kube_pod_container_resource_requests")}
    for p in pods:
        _ksm(ksm, start, p, scheme)
    for metric, series in (dcgm | ksm).items():
        write_family(out, metric, series)
    end_file(out)


def _ksm(out: dict[str, list], start: float, p: Pod, scheme: Scheme) -> None:
    """kube-state-metrics' series of pod `p`."""
    life = list(times(start, p.begins, p.run[1]))
    base = {"namespace": "jhub", "pod": p.name, "uid": p.uid}
    scheduled_at = start + max([w.end for w in p.waits if w.unschedulable], default=p.begins) * HOUR
    restart = start + p.ksm_restart * HOUR if p.ksm_restart is not None else None

    def add(metric: str, own: dict[str, str], points: list, node: bool = False) -> None:
        # the series a restart of kube-state-metrics (and scheduling, for a request's `node`)
        # splits the samples into
        cuts = sorted({x for x in (restart, scheduled_at if node else None) if x is not None})
        for a, b in zip([-1.0, *cuts], [*cuts, float("inf")], strict=True):
            part = [(t, v) for t, v in points if a <= t < b]
            labels = own | ({"node": p.device.host} if node and a >= scheduled_at else {})
            target = KSM_TARGET | ({"instance": "10.0.0.10:8080"} if restart is not None and a >= restart else {})
            if part:
                out[metric].append((scraped(labels, target, scheme.honor_labels), part))

    add("kube_pod_labels", base | {"label_hub_jupyter_org_username": p.user}, [(t, 1.0) for t in life])
    if p.profile:
        add("kube_pod_annotations", base | {"annotation_jupyterhub_gpu_reclaim_profile": p.profile},
            [(t, 1.0) for t in life])
    running = start + p.run[0] * HOUR
    for phase in ("Pending", "Running"):
        add("kube_pod_status_phase", base | {"phase": phase},
            [(t, float((t < running) == (phase == "Pending"))) for t in life])
    for condition in ("true", "false"):
        add("kube_pod_status_scheduled", base | {"condition": condition},
            [(t, float((t < scheduled_at) == (condition == "false"))) for t in life])
    add("kube_pod_status_unschedulable", base, [(t, 1.0) for t in life if t < scheduled_at])
    for resource, value, unit in ((p.resource, float(p.gpus), "integer"), ("cpu", 0.5, "core")):
        add("kube_pod_container_resource_requests",
            base | {"container": "notebook", "resource": resource, "unit": unit},
            [(t, value) for t in life], node=True)
