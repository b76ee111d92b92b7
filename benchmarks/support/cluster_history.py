"""A month of a shared GPU cluster as a scheduler makes it and as dcgm-exporter and
kube-state-metrics write it (benchmarks/report_month.py), one UTC day of OpenMetrics at a time.

The scheduler: each of `users` users asks for a GPU again some hours after their last session
ended (most of those who would ask at night ask in the morning); the pod lands on whichever GPU is free (one chosen at random), or waits Pending
(unschedulable) in a first-come queue until one frees, and gets it a few seconds after its
holder ended (a hand-over inside a scrape). z2jh names every session's pod `jupyter-<user>`,
so a pod name comes back on any GPU, and each session is a pod of its own (its uid). Some
pods then pull their image for a minute before they run. Each user picks one of two
profiles at each spawn.

The mess of real systems: kube-state-metrics is upgraded from 1.9.8 to 2.10.1 half-way
(a new pod and address; 1.x writes every pod label and no uid or annotations, 2.x only the
allow-listed labels and the profile annotation, with uid); a pod's request series gains
`node` once it is scheduled (a pod that waited has two); one node's dcgm-exporter is
unreachable for 45 minutes while its pods keep running; a free GPU's series carries no pod.
dcgm-exporter's series are stored as a `honorLabels: false` scrape stores them (`exported_*`).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.prometheus_history import end_file, write_family

DAY = 86400
HOUR = 3600
GPUS_PER_NODE = 8
PROFILES = ("a100", "a100-long")
OUTAGE = (3, 0.3, 45 * 60)  # node, when (a fraction of the window), seconds: its exporter unreachable
UPGRADE = 0.5  # when kube-state-metrics 1.9.8 becomes 2.10.1 (a fraction of the window, plus 5 h)
KSM_V1 = {"namespace": "monitoring", "pod": "kube-state-metrics-6b8f9c7d4-x2k1p", "job": "kube-state-metrics",
          "instance": "10.0.0.9:8080"}
KSM_V2 = {**KSM_V1, "pod": "kube-state-metrics-5d7c8b9f6-q9z4m", "instance": "10.0.4.17:8080"}
Z2JH_LABELS = {"label_component": "singleuser-server", "label_app": "jupyterhub", "label_release": "jhub",
               "label_heritage": "jupyterhub", "label_hub_jupyter_org_network_access_hub": "true"}


@dataclass
class Session:
    """One pod: asked for at `created`, given `gpu` at `scheduled` (None: still waiting at the
    window's end), running from `running` to `end`, its GPU busy in `bursts`."""

    user: str
    uid: str
    profile: str
    created: float
    length: float
    bursts: list[tuple[float, float, float]] = field(default_factory=list)
    gpu: int | None = None
    scheduled: float | None = None
    running: float | None = None
    end: float = 0.0

    @property
    def pod(self) -> str:
        return f"jupyter-{self.user}"


def schedule(gpus: int, users: int, days: int, seed: int) -> list[Session]:
    """The sessions of `users` users on `gpus` GPUs over `days` days, placed as the module says."""
    rng = random.Random(seed)
    window = days * DAY
    events: list[tuple[float, int, int]] = [(rng.uniform(0, 12 * HOUR), 1, u) for u in range(users)]  # 1: asks
    heapq.heapify(events)
    free, queue, out = set(range(gpus)), deque[Session](), list[Session]()

    def place(s: Session, gpu: int, t: float) -> None:
        free.discard(gpu)
        s.gpu, s.scheduled = gpu, t
        s.running = t + (rng.uniform(20, 90) if rng.random() < 0.3 else rng.uniform(2, 6))  # an image pull
        s.end = min(s.running + s.length, window)
        if rng.random() > 0.15:  # 15 % never use the GPU
            b = s.running + rng.uniform(0, HOUR)
            while b < s.end:
                d = rng.uniform(300, 2 * HOUR)
                s.bursts.append((b, b + d, rng.uniform(20, 95)))
                b += d + rng.uniform(300, 4 * HOUR)
        heapq.heappush(events, (s.end, 0, gpu))  # 0: frees its GPU
        heapq.heappush(events, (_next_ask(s.end + rng.uniform(1, 24) * HOUR, rng), 1, int(s.user[4:])))

    while events:
        t, kind, x = heapq.heappop(events)
        if t >= window:
            break
        if kind == 1:
            s = Session(f"user{x}", f"{seed:08x}-{len(out):04x}-4000-8000-{x:012x}", rng.choice(PROFILES), t,
                        rng.uniform(1, 12) * HOUR)
            out.append(s)
            if free:
                place(s, rng.choice(sorted(free)), t + rng.uniform(1, 5))
            else:
                queue.append(s)
        elif queue:
            place(queue.popleft(), x, t + rng.uniform(1, 20))
        else:
            free.add(x)
    for s in queue:  # still waiting at the end
        s.end = window
    return out


def _next_ask(t: float, rng: random.Random) -> float:
    """When a user asks again: most who would ask at night (22:00 to 07:00) ask in the morning
    instead (07:00 to 10:00), so that mornings queue for a GPU."""
    hour = t % DAY / HOUR
    if (hour >= 22 or hour < 7) and rng.random() < 0.8:
        return (t // DAY + (hour >= 22)) * DAY + rng.uniform(7, 10) * HOUR
    return t


def _ticks(a: float, b: float, lo: float, hi: float, scrape: int) -> range:
    """The scrapes (at 7 s past each `scrape` seconds) in [a, b) and in the day [lo, hi)."""
    a, b = max(a, lo), min(b, hi)
    first = int(a // scrape) * scrape + 7
    return range(first + (scrape if first < a else 0), int(-(-b // 1)), scrape) if b > a else range(0)


def _ksm(a: float, b: float, upgrade: float) -> Iterator[tuple[float, float, bool]]:
    """[a, b) split at kube-state-metrics' upgrade: (from, to, written by 2.x)."""
    if a < upgrade:
        yield a, min(b, upgrade), False
    if b > upgrade:
        yield max(a, upgrade), b, True


def write_history(path: Path, start: float, found: list[Session], gpus: int, days: int, scrape: int, seed: int,
                  day: int) -> int:
    """The samples of UTC day `day` of the history, written to `path` (promtool reads its whole
    input once a block: a file a day keeps a month's build linear); how many."""
    lo, hi = day * DAY, (day + 1) * DAY
    window = days * DAY
    upgrade = UPGRADE * window + 5 * HOUR
    node, at, lasts = OUTAGE
    outage = (node, at * window, at * window + lasts)
    today = [s for s in found if s.end > lo and s.created < hi]
    samples = 0
    with open(path, "w") as out:
        held: dict[int, list[tuple[float, Session]]] = {}  # each GPU's pods: when each ran, it
        for s in today:
            if s.gpu is not None and s.running is not None and s.running < s.end:
                held.setdefault(s.gpu, []).append((s.running, s))
        for metric, scale in (("DCGM_FI_DEV_GPU_UTIL", 1.0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01)):
            series = []
            for g in range(gpus):
                gone = outage[1:] if g // GPUS_PER_NODE == outage[0] else (0.0, 0.0)
                base = {"gpu": str(g % GPUS_PER_NODE), "UUID": f"GPU-{g:08d}-0000-0000-0000-000000000000",
                        "device": f"nvidia{g % GPUS_PER_NODE}", "modelName": "NVIDIA A100-SXM4-80GB",
                        "Hostname": f"gpu-node-{g // GPUS_PER_NODE}", "DCGM_FI_DRIVER_VERSION": "550.54.15",
                        "namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-{g // GPUS_PER_NODE}",
                        "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter",
                        "endpoint": "gpu-metrics", "job": "nvidia-dcgm-exporter",
                        "instance": f"10.1.{g // GPUS_PER_NODE}.1:9400"}
                holders = sorted(held.get(g, []), key=lambda h: h[1].created)
                free_ticks = [t for t in _ticks(lo, hi, lo, hi, scrape) if not gone[0] <= t < gone[1]
                              and not any(run <= t < s.end for run, s in holders)]
                if free_ticks:
                    series.append((base, [(start + t, 0.0) for t in free_ticks]))
                for run, s in holders:
                    rng = random.Random(f"{seed}/{s.uid}")  # the same in every day's process

                    def util(t: float, bursts=s.bursts, rng=rng) -> float:
                        for a, b, u in bursts:
                            if a <= t < b:
                                return u
                        return rng.choice((0.0, 0.0, 0.0, 0.5))

                    labels = {**base, "exported_container": "notebook", "exported_namespace": "jhub",
                              "exported_pod": s.pod}
                    series.append((labels, [(start + t, util(t) * scale) for t in _ticks(run, s.end, lo, hi, scrape)
                                            if not gone[0] <= t < gone[1]]))
            samples += sum(len(points) for _, points in series)
            write_family(out, metric, series)
        for metric in ("kube_pod_labels", "kube_pod_annotations", "kube_pod_status_phase",
                       "kube_pod_status_unschedulable", "kube_pod_container_resource_requests"):
            series = []
            for s in today:
                pod = {"exported_namespace": "jhub", "exported_pod": s.pod}
                for a, b, v2 in _ksm(s.created, s.end, upgrade):
                    base = {**pod, **({"uid": s.uid} if v2 else {}), **(KSM_V2 if v2 else KSM_V1)}
                    life = _ticks(a, b, lo, hi, scrape)
                    if metric == "kube_pod_labels":
                        series.append(({**base, "label_hub_jupyter_org_username": s.user,
                                        **({} if v2 else Z2JH_LABELS)}, [(start + t, 1.0) for t in life]))
                    elif metric == "kube_pod_annotations" and v2:  # 1.x writes no annotations
                        series.append(({**base, "annotation_jupyterhub_gpu_reclaim_profile": s.profile},
                                       [(start + t, 1.0) for t in life]))
                    elif metric == "kube_pod_status_phase":
                        running = s.running if s.running is not None else b
                        for phase in ("Pending", "Running"):
                            series.append(({**base, "phase": phase}, [
                                (start + t, float((t < running) == (phase == "Pending"))) for t in life]))
                    elif metric == "kube_pod_status_unschedulable":
                        waited = s.scheduled if s.scheduled is not None else b
                        if waited - s.created > 30:  # the scheduler found no GPU
                            series.append((base, [(start + t, 1.0) for t in life if t < waited]))
                    elif metric == "kube_pod_container_resource_requests":
                        request = {**base, "container": "notebook", "resource": "nvidia_com_gpu", "unit": "integer"}
                        scheduled = s.scheduled if s.scheduled is not None else b
                        series.append((request, [(start + t, 1.0) for t in life if t < scheduled]))
                        if s.gpu is not None:  # the series gains `node` once the pod is scheduled
                            series.append(({**request, "node": f"gpu-node-{s.gpu // GPUS_PER_NODE}"},
                                           [(start + t, 1.0) for t in life if t >= scheduled]))
            series = [(labels, points) for labels, points in series if points]
            samples += sum(len(points) for _, points in series)
            write_family(out, metric, series)
        end_file(out)
    return samples
