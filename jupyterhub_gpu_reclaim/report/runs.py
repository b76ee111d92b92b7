"""Stretches of kube-state-metrics' series on the report's step grid: the steps at which a series
was there (a pod Running, Pending, unschedulable, its profile annotation, its asking for a
shared GPU), read as where each stretch begins and ends — a point a stretch end, however long
the stretch — instead of a point a step: a month of 10,000 pods' phases is then some 40,000
points, not millions.

Each query is asked three times: as is at the window's first step (the series there from
its start), `unless` itself a step before (the steps where a stretch begins) and `unless`
itself a step after (where one ends), in pages of PAGE_STEPS."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..signals.gpu_readings import holder_labels, pod_of
from .value_classes import points
from .prometheus_range import PrometheusHistory

Run = tuple[int, int]  # [first step, the step after its last)
Pod = tuple[str, str]  # (namespace, pod)
T = TypeVar("T")
_BEGIN, _END = 0, 1
# Prometheus holds each operand of a query whole, a point a step for each series selected (a
# pod's phases are written 0 while not in them): 200 GPUs' pods a week at once took it to
# 750 MiB; pages of a day, asked one at a time, keep that some 4 times smaller
PAGE_STEPS = 1440


@dataclass
class Stretches:
    """The stretches of one series (its labels as Prometheus wrote them)."""

    labels: dict[str, str]
    events: list[tuple[int, int]] = field(default_factory=list)  # (step, _BEGIN or _END)
    at_start: Any = None  # the value at the window's first step, where the series was there
    begin_values: dict[int, Any] = field(default_factory=dict)  # each begin's value

    def runs(self, steps: int) -> list[tuple[Run, Any]]:
        """The stretches, each with the series' value where it begins."""
        out: list[tuple[Run, Any]] = []
        begun = (0, self.at_start) if self.at_start is not None else None
        for i, kind in sorted(self.events):
            if kind == _BEGIN:
                begun = (i, self.begin_values[i]) if begun is None else begun
            elif begun is not None:
                out.append(((begun[0], i + 1), begun[1]))
                begun = None
        if begun is not None:
            out.append(((begun[0], steps), begun[1]))
        return out


async def valued_stretches(prometheus: PrometheusHistory, query: Callable[[int, str], str], start: float, steps: int,
                           step: int) -> list[tuple[dict[str, str], list[tuple[Run, Any]]]]:
    """Each series of `query(step, offset)` with its stretches over the `steps` steps from
    `start`, each with the series' value (as written) where it begins."""
    now, before, after = (f"({query(step, offset)})" for offset in ("", f" offset {step}s", f" offset -{step}s"))
    found: dict[tuple, Stretches] = {}

    def of(labels: dict[str, str]) -> Stretches:
        key = tuple(sorted(labels.items()))
        s = found.get(key)
        if s is None:
            s = found[key] = Stretches(labels)
        return s

    for labels, value in await prometheus.instant(query(step, ""), start):
        of(labels).at_start = value
    for i in range(0, steps, PAGE_STEPS):
        n = min(PAGE_STEPS, steps - i)
        first, last = start + i * step, start + (i + n - 1) * step
        for other, kind in ((before, _BEGIN), (after, _END)):  # one at a time: see PAGE_STEPS
            for series in await prometheus.range(f"{now} unless {other}", first, last, step):
                s = of(series.labels)
                for k, value in points(series.values, first, step, n):
                    s.events.append((i + k, kind))
                    if kind == _BEGIN:
                        s.begin_values[i + k] = value
    return [(s.labels, s.runs(steps)) for s in found.values()]


async def stretches(prometheus: PrometheusHistory, query: Callable[[int, str], str], start: float, steps: int,
                    step: int) -> list[tuple[dict[str, str], list[Run]]]:
    """Each series of `query(step, offset)` with its stretches over the `steps` steps from `start`."""
    return [(labels, [run for run, _ in runs])
            for labels, runs in await valued_stretches(prometheus, query, start, steps, step)]


def per_pod(found: Iterable[tuple[Mapping[str, str], T]]) -> dict[Pod, list[tuple[Mapping[str, str], T]]]:
    """Each pod's series with their stretches (the pod named as gpu_readings.holder_labels decides)."""
    found = list(found)
    keys = holder_labels((labels for labels, _ in found), "auto")
    out: dict[Pod, list[tuple[Mapping[str, str], T]]] = {}
    for labels, runs in found:
        pod = pod_of(labels, keys)
        if pod is not None:
            out.setdefault(pod, []).append((labels, runs))
    return out


def by_pod(found: Iterable[tuple[Mapping[str, str], list[Run]]]) -> dict[Pod, list[Run]]:
    """The stretches of each pod (of all its series: merged where they overlap or touch)."""
    return {pod: merged(run for _, runs in series for run in runs) for pod, series in per_pod(found).items()}


def labelled(found: Iterable[tuple[Mapping[str, str], list[Run]]], label: str) -> dict[Pod, list[tuple[Run, str]]]:
    """Each pod's stretches, each with the value of `label` on its series."""
    return {pod: [(run, labels.get(label, "")) for labels, runs in series for run in runs]
            for pod, series in per_pod(found).items()}


def most_of(valued: Iterable[tuple[Run, T]], a: int, b: int, default: T) -> T:
    """The value whose stretches hold the most steps of [a, b) (`default` where none holds one)."""
    best: tuple[int, T] | None = None
    for run, value in valued:
        n = within([run], a, b)
        if n and (best is None or n > best[0]):
            best = (n, value)
    return default if best is None else best[1]


Asked = dict[tuple[str, str], list[tuple[Run, float]]]  # (container, resource) -> its request's stretches


def asked(found: Iterable[tuple[Mapping[str, str], list[tuple[Run, Any]]]]) -> dict[Pod, Asked]:
    """Each pod's GPU requests (gpu_requests' series, valued_stretches), by container and
    resource: a request is a series of its own again when kube-state-metrics adds `node` once the
    pod is scheduled or restarts (`instance`, `uid`), and a reused pod name's instances each
    have theirs; gpus_asked counts each once."""
    out: dict[Pod, Asked] = {}
    for pod, series in per_pod(found).items():
        for labels, runs in series:
            key = (labels.get("container", ""), labels.get("resource", ""))
            valued = [(run, gpus) for run, value in runs if (gpus := _gpus(value)) > 0]
            if valued:
                out.setdefault(pod, {}).setdefault(key, []).extend(valued)
    return out


def gpus_asked(requests: Asked, a: int, b: int) -> float:
    """The GPUs a pod asked for over the steps [a, b): each container's request as the series
    that holds the most of them says (the pod instance's own, under a reused name)."""
    return sum(most_of(runs, a, b, 0.0) for runs in requests.values())


def _gpus(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


def merged(runs: Iterable[Run]) -> list[Run]:
    """The union of `runs`, in order."""
    out: list[Run] = []
    for a, b in sorted(runs):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def within(runs: list[Run], a: int, b: int) -> int:
    """How many steps of [a, b) the (ordered, disjoint) `runs` hold."""
    return sum(max(0, min(b, y) - max(a, x)) for x, y in runs if x < b and y > a)
