"""The GPU history as timelines: one byte a step for each GPU a pod held (ABSENT: not held or
not seen, IDLE, USED: at or above the idle threshold, NO_VALUE: held but no reading the
service would trust), read from the range answers by signals.gpu_readings, the one home of the
exporters' label schemes and reading rules (exported_* labels, MIG instances read by engine
activity, time-sliced and virtual GPUs, the no-hostPID case).

gpu_readings reads one instant at a time; a month of 200 GPUs has millions of them. Its rules
concern one physical device at a time (the holder labels aside, which are decided for the whole
answer, as gpu_readings.holder_labels decides them), so each page is read per device and per
distinct set of values at a step, each value first reduced to what the rules and the threshold
tell apart (0, under the threshold, at or above it, no value, malformed): the same rules,
applied once per pattern instead of once per step."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..signals.gpu_readings import (ENGINE_ACTIVE, HOSTNAME, PodLabel, Series, holder_labels,
                                    pod_of, readings_from_series, series_value)
from .prometheus_range import RangeSeries, points
from .promql import READ_FIELDS

ABSENT, IDLE, NO_VALUE, USED = 0, 1, 2, 3
_T0 = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)  # the readings' time is not used
_HOLDER = ("pod", "namespace", "exported_pod", "exported_namespace")
Pod = tuple[str, str]  # (namespace, pod)


@dataclass
class GpuTimeline:
    """The steps of one GPU (or MIG instance, or time-sliced replica) as one pod held it."""

    pod: Pod
    gpu: str  # the exporter's gpu label (gpu/instance on MIG), and its node
    node: str
    codes: bytearray
    shared: bool = False  # time-sliced: its values are the whole device's (gpu_readings.shared_devices)


@dataclass
class Timelines:
    """Every GPU timeline of the report's window: `steps` steps of `step` seconds from `start`."""

    start: float
    step: int
    steps: int
    threshold: float
    pod_label: PodLabel = "auto"
    gpus: dict[tuple, GpuTimeline] = field(default_factory=dict)
    # each value as written -> what the rules tell apart of it (_reduced), per metric
    _reduced_values: dict[str, dict[Any, Any]] = field(default_factory=dict, repr=False)

    def add_page(self, first: float, last: float, series: Iterable[RangeSeries]) -> None:
        """Read one page of the GPU queries (promql.gpu_queries), its steps `first` to `last`."""
        series = [s for s in series if s.labels.get("field") in READ_FIELDS]
        if not series:
            return
        keys = holder_labels((s.labels for s in series), self.pod_label)
        base = round((first - self.start) / self.step)
        length = min(round((last - first) / self.step) + 1, self.steps - base)
        groups: dict[tuple[str, str], list[tuple[str, dict[str, str], list[Any]]]] = {}
        for s in series:
            name = READ_FIELDS[s.labels["field"]]
            labels = {k: v for k, v in s.labels.items() if k not in _HOLDER}
            labels["pod"], labels["namespace"] = s.labels.get(keys[0], ""), s.labels.get(keys[1], "")
            host = next((s.labels[k] for k in HOSTNAME if s.labels.get(k)), "")
            device = s.labels.get("UUID") or f"gpu {s.labels.get('gpu', '')}"
            column: list[Any] = [None] * length
            reduced = self._reduced_values.setdefault(name, {})
            if not self._read_run(s.values, first, length, name, reduced, column):
                for i, raw in points(s.values, first, self.step, length):
                    try:
                        column[i] = reduced[raw]
                    except KeyError:
                        column[i] = reduced[raw] = self._reduced(name, raw)
                    except TypeError:  # not hashable: not a value
                        column[i] = "malformed"
            groups.setdefault((host, device), []).append((name, labels, column))
        for (host, _), members in groups.items():
            self._read_device(host, members, base)

    def _read_run(self, values: list[Any], first: float, length: int, name: str, reduced: dict[Any, Any],
                  column: list[Any]) -> bool:
        """The common case at C speed: a series' points one a step without a gap (Prometheus
        writes a range's points in time order, on the grid), its values hashable. False when
        the points are anything else (then read one by one)."""
        try:
            n = len(values)
            i0 = round((values[0][0] - first) / self.step)
            span = round((values[-1][0] - first) / self.step) - i0 + 1
            raws = [pair[1] for pair in values]
            for raw in set(raws) - reduced.keys():
                reduced[raw] = self._reduced(name, raw)
        except (TypeError, ValueError, OverflowError, IndexError):
            return False
        if span != n or i0 < 0 or i0 + n > length or any(len(pair) != 2 for pair in (values[0], values[-1])):
            return False
        column[i0:i0 + n] = [reduced[raw] for raw in raws]
        return True

    def _reduced(self, name: str, raw: Any) -> Any:
        """What the reading rules and the threshold tell apart of a value: 0, under the
        threshold, at or above it, no value ("NaN"), malformed (kept as written)."""
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            return "malformed"
        try:
            x = series_value(name, raw)
        except ValueError:
            return raw if isinstance(raw, str) and len(raw) <= 40 else "malformed"
        if x is None:
            return "NaN"
        scale = 100.0 if name == ENGINE_ACTIVE else 1.0
        pct = x * scale
        reduced = 0.0 if pct == 0 else (self.threshold / 2 if pct < self.threshold else 100.0)
        return reduced / scale

    def _read_device(self, host: str, members: list[tuple[str, dict[str, str], list[Any]]], base: int) -> None:
        columns = [m[2] for m in members]
        memo: dict[tuple, list[tuple[bytearray, int]]] = {}
        for i, values in enumerate(zip(*columns, strict=True)):
            writes = memo.get(values)
            if writes is None:
                writes = memo[values] = self._codes(host, members, values)
            for codes, code in writes:
                codes[base + i] = code

    def _codes(self, host: str, members: list[tuple[str, dict[str, str], list[Any]]],
               values: tuple) -> list[tuple[bytearray, int]]:
        present = [Series(name, labels, v) for (name, labels, _), v in zip(members, values, strict=True)
                   if v is not None]
        writes = []
        for pod, reading in readings_from_series(present, _T0, "pod").items():
            for gpu, util in zip(reading.gpus, reading.util, strict=True):
                line = self._timeline(pod, host, gpu)
                line.shared = line.shared or reading.shared
                writes.append((line.codes, NO_VALUE if util is None else USED if util >= self.threshold else IDLE))
        return writes

    def _timeline(self, pod: Pod, host: str, gpu: str) -> GpuTimeline:
        key = (pod, host, gpu)
        line = self.gpus.get(key)
        if line is None:
            line = self.gpus[key] = GpuTimeline(pod, gpu, host, bytearray(self.steps))
        return line


@dataclass(frozen=True)
class PodInfo:
    """What kube-state-metrics says of a hub user's pod."""

    user: str
    server: str = ""
    profile: str = ""


def pods_of(answers: Iterable[Mapping[str, str]], user_label: str, server_label: str,
            component_label: str, singleuser: str) -> dict[Pod, PodInfo]:
    """The hub users' pods in kube_pod_labels answers (either label style: v1 writes the
    component label too, and a pod whose component is not a single-user server is left out;
    v2 writes only the allow-listed labels). The pod's own labels are renamed exported_* where
    Prometheus renamed them (gpu_readings.holder_labels decides, as for the exporter)."""
    answers = list(answers)
    keys = holder_labels(answers, "auto")
    pods = {}
    for labels in answers:
        pod = pod_of(labels, keys)
        component = labels.get(component_label)
        if pod is None or not labels.get(user_label) or (component and component != singleuser):
            continue
        pods[pod] = PodInfo(labels[user_label], labels.get(server_label, ""))
    return pods


def pod_values(answers: Iterable[tuple[Mapping[str, str], Any]]) -> dict[Pod, Any]:
    """The value of each pod's series in an instant answer (labels renamed as in pods_of)."""
    answers = list(answers)
    keys = holder_labels((labels for labels, _ in answers), "auto")
    out = {}
    for labels, value in answers:
        pod = pod_of(labels, keys)
        if pod is not None:
            out[pod] = value
    return out


def pending_steps(start: float, step: int, steps: int, first: float, series: Iterable[RangeSeries],
                  into: dict[Pod, bytearray]) -> None:
    """Mark the steps each pod was Pending (promql.pending_query's page from `first`)."""
    series = list(series)
    keys = holder_labels((s.labels for s in series), "auto")
    base = round((first - start) / step)
    for s in series:
        pod = pod_of(s.labels, keys)
        if pod is None:
            continue
        line = into.setdefault(pod, bytearray(steps))
        for i, _ in points(s.values, first, step, steps - base):
            line[base + i] = 1
