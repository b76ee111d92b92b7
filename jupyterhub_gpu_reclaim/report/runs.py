"""Stretches of kube-state-metrics' series on the report's step grid: the steps at which a series
was there (a pod Running, Pending, unschedulable, its profile annotation, its asking for a
shared GPU), read as where each stretch begins and ends — a point a stretch end, however long
the stretch — instead of a point a step: a month of 10,000 pods' phases is then some 40,000
points, not millions.

Each query is asked three times: as is at the window's first step (the series there from
its start), `unless` itself a step before (the steps where a stretch begins) and `unless`
itself a step after (where one ends), in pages of PAGE_STEPS."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from ..signals.gpu_readings import holder_labels, pod_of
from .columns import points
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
    at_start: bool = False

    def runs(self, steps: int) -> list[Run]:
        out: list[Run] = []
        begun = 0 if self.at_start else None
        for i, kind in sorted(self.events):
            if kind == _BEGIN:
                begun = i if begun is None else begun
            elif begun is not None:
                out.append((begun, i + 1))
                begun = None
        if begun is not None:
            out.append((begun, steps))
        return out


async def stretches(prometheus: PrometheusHistory, query: Callable[[int, str], str], start: float, steps: int,
                    step: int) -> list[tuple[dict[str, str], list[Run]]]:
    """Each series of `query(step, offset)` with its stretches over the `steps` steps from `start`."""
    now, before, after = (f"({query(step, offset)})" for offset in ("", f" offset {step}s", f" offset -{step}s"))
    found: dict[tuple, Stretches] = {}

    def of(labels: dict[str, str]) -> Stretches:
        key = tuple(sorted(labels.items()))
        s = found.get(key)
        if s is None:
            s = found[key] = Stretches(labels)
        return s

    for labels, _ in await prometheus.instant(query(step, ""), start):
        of(labels).at_start = True
    for i in range(0, steps, PAGE_STEPS):
        n = min(PAGE_STEPS, steps - i)
        first, last = start + i * step, start + (i + n - 1) * step
        for other, kind in ((before, _BEGIN), (after, _END)):  # one at a time: see PAGE_STEPS
            for series in await prometheus.range(f"{now} unless {other}", first, last, step):
                of(series.labels).events.extend((i + k, kind) for k, _ in points(series.values, first, step, n))
    return [(s.labels, s.runs(steps)) for s in found.values()]


def per_pod(found: Iterable[tuple[Mapping[str, str], list[Run]]]) -> dict[Pod, list[tuple[Mapping[str, str], list[Run]]]]:
    """Each pod's series with their stretches (the pod named as gpu_readings.holder_labels decides)."""
    found = list(found)
    keys = holder_labels((labels for labels, _ in found), "auto")
    out: dict[Pod, list[tuple[Mapping[str, str], list[Run]]]] = {}
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
