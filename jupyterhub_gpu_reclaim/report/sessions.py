"""The pods' sessions: a pod instance's GPUs over the steps it held them, with its profile and
whether its GPUs were time-sliced. z2jh names every session's pod `jupyter-<user>`, so a pod
name's timelines (timelines.py) hold many sessions; they are told apart by kube-state-metrics'
stretches (runs.py) of the pod Running and of its profile annotation (each begins a new
instance: a new pod), and, where it shows neither, by a gap of more than `stale` steps in the
exporter's readings.

A step at which kube-state-metrics shows the pod Running and no exporter series names it (the
exporter down, restarted or unreachable) is held with no reading: the pod's GPUs were
allocated, nobody could tell whether they were used."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .timelines import NO_VALUE, GpuTimeline, Pod
from .runs import Asked, Run, gpus_asked, merged, most_of, within


@dataclass
class Segment:
    """Steps of one GPU of a session (or of `gpus` GPUs held with no reading: no device known)."""

    first: int
    codes: bytes
    gpus: int = 1
    vgpu: bool = False

    @property
    def end(self) -> int:
        return self.first + len(self.codes)


@dataclass
class Session:
    """One pod instance: its GPUs' segments from step `first` to `end`."""

    pod: Pod
    first: int
    end: int
    segments: list[Segment] = field(default_factory=list)
    profile: str = ""
    shared: bool = False  # time-sliced: the exporter's vgpu label, or a shared GPU asked for

    def held_at(self, i: int) -> int:
        """How many GPUs the session held at step `i`."""
        return sum(s.gpus for s in self.segments if s.first <= i < s.end and s.codes[i - s.first])

    def codes(self) -> bytes:
        """One code a step from `first`: the highest of its GPUs' (USED over NO_VALUE over IDLE
        over ABSENT: the codes' order), ABSENT where it held none."""
        out = bytearray(self.end - self.first)
        for s in self.segments:
            a = s.first - self.first
            out[a:a + len(s.codes)] = bytes(map(max, out[a:a + len(s.codes)], s.codes))
        return bytes(out)


@dataclass
class PodFacts:
    """What kube-state-metrics says of the pods, as stretches of steps."""

    running: Mapping[Pod, list[Run]] = field(default_factory=dict)
    profiles: Mapping[Pod, list[tuple[Run, str]]] = field(default_factory=dict)
    shared: Mapping[Pod, list[Run]] = field(default_factory=dict)
    requests: Mapping[Pod, Asked] = field(default_factory=dict)  # the GPUs each pod instance asked for


def sessions(gpus: Mapping[tuple, GpuTimeline], facts: PodFacts, stale: int) -> Iterator[Session]:
    """Each pod instance's session, pod by pod."""
    by_pod: dict[Pod, list[GpuTimeline]] = {}
    for line in gpus.values():
        by_pod.setdefault(line.pod, []).append(line)
    for pod in facts.running:
        if pod in facts.requests:
            by_pod.setdefault(pod, [])
    for pod, lines in by_pod.items():
        segments = [Segment(first, bytes(codes), vgpu=line.vgpu) for line in lines for first, codes in line.chunks]
        segments += _unread(lines, segments, facts.running.get(pod, []), facts.requests.get(pod, {}))
        profiles = facts.profiles.get(pod, [])
        begins = sorted({a for a, _ in facts.running.get(pod, [])} | {a for (a, _), _ in profiles})
        for first, end in _spans(segments, begins, stale):
            session = Session(pod, first, end, [s for s in map(_clip(first, end), segments) if s is not None])
            session.profile = most_of(profiles, first, end, "")
            session.shared = (any(s.vgpu for s in session.segments)
                              or within(facts.shared.get(pod, []), first, end) > 0)
            yield session


_HELD = bytes([0] + [1] * 255)  # a code -> 1 where the step is held


def _unread(lines: list[GpuTimeline], segments: list[Segment], running: list[Run],
            requests: Asked) -> list[Segment]:
    """The steps a pod that asked for GPUs was Running with no GPU reading: held with no
    reading, as many GPUs as it held in that stretch of Running (else as it asked for then)."""
    out = []
    for a, b in running:
        requested = gpus_asked(requests, a, b)
        if requested <= 0:
            continue
        mask = 0  # the steps of [a, b) some GPU of the pod held, a byte each of a number
        for s in segments:
            x, y = max(a, s.first), min(b, s.end)
            if x < y:
                mask |= int.from_bytes(s.codes[x - s.first:y - s.first].translate(_HELD), "little") << 8 * (x - a)
        gpus = sum(1 for line in lines if any(max(a, f) < min(b, f + len(c)) for f, c in line.chunks))
        for m in re.finditer(rb"\x00+", mask.to_bytes(b - a, "little")):
            out.append(Segment(a + m.start(), bytes([NO_VALUE]) * (m.end() - m.start()),
                               gpus or max(1, round(requested))))
    return out


def _spans(segments: list[Segment], begins: list[int], stale: int) -> list[Run]:
    """The sessions' spans: the held steps, a gap of more than `stale` steps apart, each cut
    where kube-state-metrics shows a pod instance begin."""
    spans: list[list[int]] = []
    for a, b in merged((s.first, s.end) for s in segments):
        if spans and a - spans[-1][1] <= stale:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    out = []
    for a, b in spans:
        cuts = begins[bisect_right(begins, a):bisect_right(begins, b - 1)]
        for x, y in zip([a, *cuts], [*cuts, b], strict=True):
            out.append((x, y))
    return out


def _clip(first: int, end: int):
    def clip(s: Segment) -> Segment | None:
        a, b = max(first, s.first), min(end, s.end)
        if a >= b:
            return None
        codes = s.codes[a - s.first:b - s.first]
        return Segment(a, codes, s.gpus, s.vgpu) if codes.strip(b"\x00") else None
    return clip
