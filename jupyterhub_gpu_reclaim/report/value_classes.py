"""A series' points as one byte a step: the class of its value at each step of a page (0: no
point), each class one value as the reading rules tell it apart (timelines.Timelines._reduced).

A month of 200 GPUs is some 12 million points. Prometheus writes a range's points in time
order on the step grid, a series' points mostly in runs of consecutive steps (or every other
step, where the scrape interval is twice the step): each run is found by a binary search on
its times, checked whole by one list comparison, and its values turned into classes by one
`map` over a dict, with no Python code a point. Points that are anything else (off the grid,
out of order, not [time, value] pairs, unhashable values, scattered) are read one by one
(`points`), as they always were: the result is the same either way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

MALFORMED = "malformed"
MAX_CLASSES = 255  # class 0 is "no point"; a byte holds the rest
_time, _value = itemgetter(0), itemgetter(1)
MIN_RUN, MAX_SHORT_RUNS = 16, 32  # past 32 runs of under 16 points, a series' points are read one by one


class Classes(dict):
    """raw value as written -> its class (1..MAX_CLASSES); `meaning[c]` is the value class c
    stands for (what `reduce` made of the raw value). Past MAX_CLASSES distinct values (a
    Prometheus answering garbage: each unreadable string is kept for its log line) every new
    one is MALFORMED, which the rules read the same."""

    def __init__(self, reduce: Callable[[Any], Any]) -> None:
        super().__init__()
        self.reduce = reduce
        self.meaning: list[Any] = [None, MALFORMED]
        self._class: dict[Any, int] = {MALFORMED: 1}

    def __missing__(self, raw: Any) -> int:
        value = self.reduce(raw)
        c = self._class.get(value)
        if c is None:
            if len(self.meaning) > MAX_CLASSES:
                c = 1
            else:
                c = self._class[value] = len(self.meaning)
                self.meaning.append(value)
        self[raw] = c
        return c

    def of(self, raw: Any) -> int:
        try:
            return self[raw]
        except TypeError:  # not hashable: not a value
            return 1


def points(values: list[Any], first: float, step: int, steps: int) -> Iterator[tuple[int, Any]]:
    """(step index from `first`, value as written) of each point on the grid of `steps` steps;
    a point that is not [a finite time, value] or off the grid is left out."""
    for pair in values:
        try:
            t, value = pair
            i = round((t - first) / step)
        except (TypeError, ValueError, OverflowError):
            continue
        if 0 <= i < steps and not isinstance(t, bool):
            yield i, value


def column(values: list[Any], first: float, step: int, steps: int, classes: Classes) -> bytearray:
    """The class of the series' value at each of `steps` steps from `first` (0: no point);
    where a step has several points, the last one's."""
    out = bytearray(steps)
    try:
        if set(map(len, values)) - {2}:  # TypeError for a point without a length
            raise TypeError
        times = list(map(_time, values))  # TypeError, KeyError for a point that is no pair
    except (TypeError, KeyError):
        times = []
    k = _runs(values, times, first, step, steps, classes, out) if times else 0
    for i, raw in points(values[k:], first, step, steps):
        out[i] = classes.of(raw)
    return out


def _runs(values: list[Any], times: list[Any], first: float, step: int, steps: int, classes: Classes,
          out: bytearray) -> int:
    """Write the runs of points evenly spaced on the grid (a step apart, or two where the
    scrape interval is twice the step, ...) from the first point on; the index of the first
    point that starts none (the rest is read one by one), or that starts one short run too
    many (scattered points are read one by one, at no more than they cost before)."""
    k, n, short = 0, len(times), 0
    while k < n:
        t = times[k]
        try:
            if type(t) not in (int, float) or (t - first) % step:  # a bool, NaN, off the grid
                return k
            stride = int(times[k + 1] - t) if k + 1 < n else step
        except (OverflowError, TypeError, ValueError):  # an int of 400 digits, a time that is not a number
            return k
        if stride <= 0 or stride % step:
            return k
        t = int(t)
        lo, hi = k + 1, n  # times[k:lo] is a run; find the longest
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if times[mid - 1] == t + (mid - 1 - k) * stride:
                lo = mid
            else:
                hi = mid - 1
        if times[k:lo] != list(range(t, t + (lo - k) * stride, stride)):
            return k  # not in order after all
        short += lo - k < MIN_RUN
        if short > MAX_SHORT_RUNS:  # scattered points: a search each costs more than reading them
            return k
        i0, every = (t - int(first)) // step, stride // step
        a, b = max(0, -(i0 // every)), min(lo - k, -(-(steps - i0) // every))  # the run's points on the page
        if a < b:
            try:
                out[i0 + a * every:i0 + b * every:every] = bytes(map(classes.__getitem__, map(_value, values[k + a:k + b])))
            except TypeError:  # a value that is not hashable
                return k
        k = lo
    return k
