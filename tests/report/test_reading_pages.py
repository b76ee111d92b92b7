"""A page of range answers read into timelines (timelines.Timelines, value_classes.py: runs of
points read in bulk, the rest point by point) gives the codes the reading rules give step by
step on the raw points: regular runs, gaps, points out of order or off the grid, points that
are no [time, value] pair, points every other step or scattered, malformed and unhashable
values, more distinct values than a byte holds, a GPU in more MIG instances than one byte of
combinations holds."""

from __future__ import annotations

import datetime as dt
import math
import random

from jupyterhub_gpu_reclaim.report.timelines import IDLE, NO_VALUE, USED, Timelines
from jupyterhub_gpu_reclaim.report.prometheus_range import RangeSeries
from jupyterhub_gpu_reclaim.signals.gpu_readings import ENGINE_ACTIVE, GPU_UTIL, Series, readings_from_series

STEP = 60
START = 1_764_547_200.0  # 2025-12-01T00:00:00Z, on the grid
STEPS = 300
THRESHOLD = 1.0
FIELD = {GPU_UTIL: "util", ENGINE_ACTIVE: "engine"}


def labels(metric: str, pod: str, gpu: str, host: str = "node-a", mig: str = "") -> dict[str, str]:
    out = {"field": FIELD[metric], "gpu": gpu, "UUID": f"GPU-{host}-{gpu}", "Hostname": host,
           "exported_pod": pod, "exported_namespace": "jhub", "pod": "dcgm-exporter-x", "namespace": "gpu"}
    if mig:
        out["GPU_I_ID"] = mig
    return out


def step_of(t) -> int | None:
    """The step a point's time falls on, by Prometheus's grid (None: no time)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        return round((t - START) / STEP) if math.isfinite(t) else None
    except OverflowError:  # an int of 400 digits
        return None


def expected(series: list[RangeSeries], first: float, steps: int) -> dict[tuple, bytes]:
    """The codes of each (pod, host, gpu) by the rules, one step at a time on the raw values
    (the last point of a step counts)."""
    at: list[dict[int, object]] = []
    for s in series:
        seen: dict[int, object] = {}
        for pair in s.values:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                continue
            i = step_of(pair[0])
            if i is not None and 0 <= i - round((first - START) / STEP) < steps:
                seen[i - round((first - START) / STEP)] = pair[1]
        at.append(seen)
    out: dict[tuple, bytearray] = {}
    t = dt.datetime.fromtimestamp(START, dt.timezone.utc)
    for i in range(steps):
        present = []
        for s, seen in zip(series, at, strict=True):
            if i in seen:
                metric = GPU_UTIL if s.labels["field"] == "util" else ENGINE_ACTIVE
                present.append(Series(metric, {k: v for k, v in s.labels.items() if k != "field"}, seen[i]))
        for pod, reading in readings_from_series(present, t, "exported_pod").items():
            host = next(s.labels["Hostname"] for s in present if s.labels["exported_pod"] == pod[1])
            for gpu, util in zip(reading.gpus, reading.util, strict=True):
                line = out.setdefault((pod, host, gpu), bytearray(steps))
                line[i] = NO_VALUE if util is None else USED if util >= THRESHOLD else IDLE
    return {k: bytes(v) for k, v in out.items()}


def read(series: list[RangeSeries], pages: int = 1) -> dict[tuple, bytes]:
    timelines = Timelines(START, STEP, STEPS, THRESHOLD, "exported_pod")
    size = STEPS // pages
    for p in range(pages):
        first = START + p * size * STEP
        timelines.add_page(first, first + (size - 1) * STEP, series)
    out = {}
    for line in timelines.gpus.values():
        codes = out[(line.pod, line.node, line.gpu)] = bytearray(STEPS)
        for i, code in line.steps():
            codes[i] = code
    return {k: bytes(v) for k, v in out.items()}


def grid(i: int) -> int:
    return int(START) + i * STEP


def test_runs_gaps_and_irregular_points_read_as_the_rules_read_each_step():
    rng = random.Random(7)
    util = [str(rng.choice([0, 0, 0.5, 37, 99.5])) for _ in range(STEPS)]
    series = [
        # a pod on GPU 0 twice, with a gap; engine activity a ratio
        RangeSeries(labels(GPU_UTIL, "jupyter-a", "0"), [[grid(i), util[i]] for i in [*range(0, 100), *range(150, 290)]]),
        RangeSeries(labels(ENGINE_ACTIVE, "jupyter-a", "0"), [[grid(i), "0.2" if i % 7 else "0"] for i in range(10, 290)]),
        # points out of order, twice on a step, off the grid, before and after the page
        RangeSeries(labels(GPU_UTIL, "jupyter-b", "1"),
                    [[grid(-5), "50"], *[[grid(i), "0"] for i in range(0, 50)], [grid(20), "80"], [grid(10), "NaN"],
                     [grid(60) + 31, "5"], [grid(61) + 29.5, "0.1"], *[[grid(i), "60"] for i in range(70, 80)],
                     [grid(400), "70"]]),
        # no pairs, bad times, malformed and unhashable values
        RangeSeries(labels(GPU_UTIL, "jupyter-c", "2"),
                    [[grid(0), "3"], [grid(1), "abc"], [grid(2), "150"], [grid(3), 5], [grid(4), None], [grid(5), [1]],
                     [grid(6), True], [True, "9"], [float("nan"), "9"], [grid(7), "1", "x"], "ab", {"t": 1},
                     [10 ** 400, "9"], [float(grid(8)), "45"], [grid(9), "-1"], [grid(10), "1e1"]]),
        # every other step (a scrape interval of twice the step) from before the page, then every step;
        # two points of every three (a 90 s scrape): short runs, read one by one past a few
        RangeSeries(labels(GPU_UTIL, "jupyter-f", "5"), [[grid(i), util[i % STEPS]] for i in [*range(-7, 151, 2), *range(152, 260)]]),
        RangeSeries(labels(GPU_UTIL, "jupyter-g", "6"), [[grid(i), util[i]] for i in range(STEPS) if i % 3 != 2]),
        # more distinct values than a byte holds: each unreadable string its own
        *[RangeSeries(labels(GPU_UTIL, f"jupyter-{x}", gpu), [[grid(i), f"{x}{i}" if i % 4 else "42"] for i in range(STEPS)])
          for x, gpu in (("d", "3"), ("e", "4"))],
    ]
    want = expected(series, START, STEPS)
    assert read(series) == want
    assert read(series, pages=3) == want  # pages of 100 steps
    assert {code for codes in want.values() for code in codes} == {0, IDLE, USED, NO_VALUE}


def test_a_gpu_in_many_mig_instances_reads_as_the_rules_read_each_step():
    rng = random.Random(3)
    series = []
    for mig in range(7):
        pod = f"jupyter-m{mig}"
        for metric, values in ((ENGINE_ACTIVE, ["0", "0.004", "0.5", "NaN"]), (GPU_UTIL, ["0"])):
            series.append(RangeSeries(labels(metric, pod, "0", "node-b", str(mig)),
                                      [[grid(i), rng.choice(values)] for i in range(STEPS) if rng.random() < 0.9]))
    want = expected(series, START, STEPS)
    assert len(want) == 7 and read(series) == want
