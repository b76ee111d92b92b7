"""The GPU history as timelines: one byte a step for each GPU a pod held (ABSENT: not held or
not seen, IDLE, USED: at or above the idle threshold, NO_VALUE: held but no reading the
service would trust), kept only for the steps it was held (a stretch of held steps each:
a month of 10,000 sessions on 200 GPUs keeps some 200 × the steps bytes, not a window's steps
for each pod name and GPU), read from the range answers by signals.gpu_readings, the one home of the
exporters' label schemes and reading rules (exported_* labels, MIG instances read by engine
activity, time-sliced and virtual GPUs, the no-hostPID case).

gpu_readings reads one instant at a time; a month of 200 GPUs has millions of them. Its rules
concern one physical device at a time (the holder labels aside, which are decided for the whole
answer, as gpu_readings.holder_labels decides them), so each page is read per device and per
distinct set of values at a step, each value first reduced to what the rules and the threshold
tell apart (0, under the threshold, at or above it, no value, malformed; a byte a step, from
value_classes.py): the same rules, applied once per pattern in the whole window instead of once per
step, their codes written to the steps by bytes.translate."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..signals.gpu_readings import (ENGINE_ACTIVE, HOSTNAME, VGPU, PodLabel, Series, holder_labels,
                                    pod_of, readings_from_series, series_value)
from .value_classes import MALFORMED, Classes, column
from .prometheus_range import RangeSeries
from .promql import READ_FIELDS

ABSENT, IDLE, NO_VALUE, USED = 0, 1, 2, 3
_T0 = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)  # the readings' time is not used
_HOLDER = ("pod", "namespace", "exported_pod", "exported_namespace")
Pod = tuple[str, str]  # (namespace, pod)
Member = tuple[str, dict[str, str], bytearray]  # a series of a device: metric, labels, its column (value_classes.py)
_KEEP = b"\xff"  # in a translated pattern: the step writes nothing to this line
_WRITTEN = re.compile(rb"[^\xff]+")


def _device_key(host: str, members: list[Member]) -> tuple:
    """What the rules read of a device's series besides their values: names and labels."""
    return host, tuple((name, tuple(labels.items())) for name, labels, _ in members)


def _dense(found: list[int]) -> bytes:
    """The translation of the classes `found` to 0, 1, 2, ... (a digit each)."""
    table = bytearray(256)
    for digit, c in enumerate(found):
        table[c] = digit
    return bytes(table)


@dataclass
class GpuTimeline:
    """The steps of one GPU (or MIG instance, or time-sliced replica) as one pod name held it:
    each stretch of held steps (first step, codes), in order (z2jh's pod names come back)."""

    pod: Pod
    gpu: str  # the exporter's gpu label (gpu/instance on MIG), and its node
    node: str
    chunks: list[tuple[int, bytearray]] = field(default_factory=list)
    vgpu: bool = False  # the exporter labels it a time-sliced replica (its values are the whole device's)

    def write(self, first: int, codes: bytes, join: int = 0) -> None:
        """Write the codes of the steps from `first` (held steps: none is ABSENT), in the last
        stretch where at most `join` steps lie between them (a scrape interval longer than the
        step leaves a gap every other step: a stretch each would cost more than the steps)."""
        if self.chunks:
            at, last = self.chunks[-1]
            if 0 <= first - (at + len(last)) <= join:
                last.extend(bytes(first - (at + len(last))))
                last.extend(codes)
                return
            if first < at + len(last):  # not after the last stretch: never from Prometheus's ordered pages
                return self._overwrite(first, codes)
        self.chunks.append((first, bytearray(codes)))

    def _overwrite(self, first: int, codes: bytes) -> None:
        steps = dict(self.steps())
        steps.update(enumerate(codes, first))
        self.chunks = []
        for i in sorted(steps):
            self.write(i, bytes([steps[i]]))

    def steps(self):
        """(step, code) of each held step."""
        for first, codes in self.chunks:
            yield from enumerate(codes, first)


@dataclass
class Timelines:
    """Every GPU timeline of the report's window: `steps` steps of `step` seconds from `start`."""

    start: float
    step: int
    steps: int
    threshold: float
    pod_label: PodLabel = "auto"
    join: int = 0  # a pod's steps at most this many apart are kept in one stretch (GpuTimeline.write)
    gpus: dict[tuple, GpuTimeline] = field(default_factory=dict)
    # each value as written -> the class of what the rules tell apart of it (_reduced), per metric
    _classes: dict[str, Classes] = field(default_factory=dict, repr=False)
    # (a device's series, their values at a step) -> the codes they give (_writes), for a page
    _read: dict[tuple, list[tuple[GpuTimeline, int]]] = field(default_factory=dict, repr=False)

    def add_page(self, first: float, last: float, series: Iterable[RangeSeries]) -> None:
        """Read one page of the GPU queries (promql.gpu_queries), its steps `first` to `last`."""
        series = [s for s in series if s.labels.get("field") in READ_FIELDS]
        if not series:
            return
        keys = holder_labels((s.labels for s in series), self.pod_label)
        self._read.clear()  # a device's series (its pod's among them) are another page's and another session's
        base = round((first - self.start) / self.step)
        length = min(round((last - first) / self.step) + 1, self.steps - base)
        groups: dict[tuple[str, str], list[Member]] = {}
        for s in series:
            name = READ_FIELDS[s.labels["field"]]
            labels = {k: v for k, v in s.labels.items() if k not in _HOLDER}
            labels["pod"], labels["namespace"] = s.labels.get(keys[0], ""), s.labels.get(keys[1], "")
            host = next((s.labels[k] for k in HOSTNAME if s.labels.get(k)), "")
            device = s.labels.get("UUID") or f"gpu {s.labels.get('gpu', '')}"
            classes = self._classes.get(name)
            if classes is None:
                classes = self._classes[name] = Classes(partial(self._reduced, name))
            groups.setdefault((host, device), []).append((name, labels, column(s.values, first, self.step, length,
                                                                                classes)))
        for (host, _), members in groups.items():
            self._read_device(host, members, base)

    def _reduced(self, name: str, raw: Any) -> Any:
        """What the reading rules and the threshold tell apart of a value: 0, under the
        threshold, at or above it, no value ("NaN"), malformed (kept as written)."""
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            return MALFORMED
        try:
            x = series_value(name, raw)
        except ValueError:
            return raw if isinstance(raw, str) and len(raw) <= 40 else MALFORMED
        if x is None:
            return "NaN"
        scale = 100.0 if name == ENGINE_ACTIVE else 1.0
        pct = x * scale
        reduced = 0.0 if pct == 0 else (self.threshold / 2 if pct < self.threshold else 100.0)
        return reduced / scale

    def _read_device(self, host: str, members: list[Member], base: int) -> None:
        """Write the device's codes from its series' columns: each distinct set of classes at
        a step is read by the rules once (in the order they first occur), and its codes are
        written to every step that has it by `bytes.translate`. The columns are first made one
        (each step's classes as the digits of one byte); a device with more combinations than
        a byte holds (a GPU split into many MIG instances) is read step by step."""
        combined, radix, digits = 0, 1, []
        for _, _, col in members:
            found = sorted(set(col))
            if radix * len(found) > 256:
                return self._read_steps(host, members, base)
            digits.append((radix, found))
            # the column's digits times radix, added to each byte: under 256 there, so no carry
            combined += int.from_bytes(col.translate(_dense(found)), "little") * radix
            radix *= len(found)
        codes = combined.to_bytes(len(members[0][2]), "little")
        device = _device_key(host, members)
        lines: dict[int, tuple[GpuTimeline, bytearray]] = {}  # id(line) -> (line, pattern -> code)
        for pattern in sorted(set(codes), key=codes.index):
            values = tuple(self._value(name, found[pattern // r % len(found)])
                           for (name, _, _), (r, found) in zip(members, digits, strict=True))
            for line, code in self._writes(device, host, members, values):
                lines.setdefault(id(line), (line, bytearray(_KEEP * 256)))[1][pattern] = code
        for line, table in lines.values():
            _write(line, codes.translate(table), base, self.join)

    def _read_steps(self, host: str, members: list[Member], base: int) -> None:
        device = _device_key(host, members)
        memo: dict[tuple, list[tuple[GpuTimeline, int]]] = {}
        lines: dict[int, tuple[GpuTimeline, bytearray]] = {}  # id(line) -> (line, its code at each step of the page)
        length = len(members[0][2])
        for i, classes in enumerate(zip(*(m[2] for m in members), strict=True)):
            writes = memo.get(classes)
            if writes is None:
                values = tuple(self._value(name, c) for (name, _, _), c in zip(members, classes, strict=True))
                writes = memo[classes] = self._writes(device, host, members, values)
            for line, code in writes:
                lines.setdefault(id(line), (line, bytearray(_KEEP * length)))[1][i] = code
        for line, page in lines.values():
            _write(line, page, base, self.join)

    def _value(self, name: str, c: int) -> Any:
        """The value class `c` of metric `name` stands for (None: no point)."""
        return self._classes[name].meaning[c] if c else None

    def _writes(self, device: tuple, host: str, members: list[Member],
                values: tuple) -> list[tuple[GpuTimeline, int]]:
        """The codes the rules give a device's series at a step with these values, each set
        of series and values read once in a page."""
        key = (device, values)
        writes = self._read.get(key)
        if writes is None:
            writes = self._read[key] = self._codes(host, members, values)
        return writes

    def _codes(self, host: str, members: list[Member],
               values: tuple) -> list[tuple[GpuTimeline, int]]:
        """The codes the reading rules give each pod's GPUs. Whether a GPU is time-sliced is
        what the exporter says of it (a `vgpu` label), never that two pods' series share the
        device in a step: a GPU handed over within a step has both, and with `honorLabels:
        true` a free GPU's series carries the exporter's own pod."""
        present = [Series(name, labels, v) for (name, labels, _), v in zip(members, values, strict=True)
                   if v is not None]
        vgpu = {(s.labels["namespace"], s.labels["pod"]) for s in present if s.labels.get(VGPU)}
        writes = []
        for pod, reading in readings_from_series(present, _T0, "pod").items():
            for gpu, util in zip(reading.gpus, reading.util, strict=True):
                line = self._timeline(pod, host, gpu)
                line.vgpu = line.vgpu or pod in vgpu
                writes.append((line, NO_VALUE if util is None else USED if util >= self.threshold else IDLE))
        return writes

    def _timeline(self, pod: Pod, host: str, gpu: str) -> GpuTimeline:
        key = (pod, host, gpu)
        line = self.gpus.get(key)
        if line is None:
            line = self.gpus[key] = GpuTimeline(pod, gpu, host)
        return line


def _write(line: GpuTimeline, page: bytes | bytearray, base: int, join: int) -> None:
    """Write a page's codes of `line` (_KEEP where the line was not held) from step `base`."""
    for m in _WRITTEN.finditer(page):
        line.write(base + m.start(), m.group(), join)


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

