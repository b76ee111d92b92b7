"""Prometheus's history, read in bounded pieces: range queries at a step, paginated by time so
that no answer holds more than `max_samples` points (nor more than Prometheus's own 11,000
points a series), after counting the series of the window (`/api/v1/series`, an index read)
against `max_series`. Every problem is a ReportError of one line: Prometheus down or
answering garbage, an error body (with 200 or not), an answer that is not the kind asked for,
too many series. No URL in an error carries its query string or a password."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

import msgspec

from ..oneline import brief
from ..signals.http_source import MiB, HttpSource, SignalError, get_json, hide_password
from .series_count import SeriesCounter, TooManySeries

log = logging.getLogger("jupyterhub_gpu_reclaim.report")

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses a range query with more (its API's limit)
MAX_ANSWER = 256 * MiB
T = TypeVar("T")


class ReportError(Exception):
    """The report cannot be made; the message is one line for the admin."""


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range answer: its labels, and its points as written ([Unix time,
    value]; read with columns.column or columns.points)."""

    labels: dict[str, str]
    values: list[Any]


class _MatrixSeries(TypedDict):
    metric: dict[str, str]
    values: list[tuple[int, str]]


class _MatrixData(TypedDict):
    resultType: str
    result: list[_MatrixSeries]


class _MatrixAnswer(TypedDict):
    status: str
    data: _MatrixData


_MATRIX = msgspec.json.Decoder(_MatrixAnswer)


def loads_range(text: str) -> Any:
    """A range answer as Prometheus writes it (times in whole seconds, values strings),
    decoded by msgspec: its points as tuples, checked as they are made, at several times
    json's speed (most of a month's report is decoding points). Anything else is decoded by
    json, as any answer, for matrix() to read or refuse as it does."""
    try:
        return _MATRIX.decode(text)
    except msgspec.DecodeError:  # not the shape above (or not JSON: json says why)
        return json.loads(text)


def _result(body: Any, kind: str) -> list:
    try:
        if body.get("status") != "success":
            raise ReportError(f"answered an error: {brief(body.get('errorType'))}: "
                              f"{brief(body.get('error'))}")
        data = body["data"]
        if data["resultType"] != kind:
            raise ReportError(f"answered a {brief(data['resultType'])}, not a {kind}")
        result = data["result"]
        if not isinstance(result, list):
            raise TypeError("result is not a list")
        return result
    except ReportError:
        raise
    except (AttributeError, KeyError, TypeError) as e:
        raise ReportError(f"answered something that is not a query answer "
                          f"({type(e).__name__}: {e}): {brief(body)}") from None


def _labels(item: Any) -> dict[str, str] | None:
    labels = item.get("metric") if isinstance(item, dict) else None
    if isinstance(labels, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return labels
    return None


def matrix(body: Any) -> list[RangeSeries]:
    """The series of a range answer. A series whose labels cannot be read is left out
    (logged); points are checked where they are read (value_classes.py, and each value by
    signals.gpu_readings.series_value)."""
    out = []
    for item in _result(body, "matrix"):
        labels = _labels(item)
        values = item.get("values") if labels is not None else None
        if labels is None or not isinstance(values, list):
            log.warning("Prometheus: a series that cannot be read, left out: %s", brief(item))
            continue
        out.append(RangeSeries(labels, values))
    return out


def vector(body: Any) -> list[tuple[dict[str, str], Any]]:
    """The series of an instant answer: labels and value as written (a series whose labels
    cannot be read is left out)."""
    out = []
    for item in _result(body, "vector"):
        labels = _labels(item)
        pair = item.get("value") if labels is not None else None
        if labels is None or not (isinstance(pair, list) and len(pair) == 2):
            log.warning("Prometheus: a series that cannot be read, left out: %s", brief(item))
            continue
        out.append((labels, pair[1]))
    return out


class PrometheusHistory(HttpSource):
    """Range and instant queries to one Prometheus, bounded as the module says."""

    def __init__(self, url: str, *, timeout: float = 120.0, max_series: int = 20_000,
                 max_samples: int = 1_000_000, headers: dict[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_series = max_series
        self.max_samples = max_samples
        self._headers = dict(headers or {})
        self.queries = 0

    def _error(self, e: ReportError) -> ReportError:
        return ReportError(f"Prometheus at {hide_password(self.url)}: {e}")

    async def _get(self, path: str, params: dict[str, str] | list[tuple[str, str]],
                   loads: Callable[[str], Any] = json.loads, watch: Callable[[bytes], None] | None = None) -> Any:
        self.queries += 1
        try:
            return await get_json(self._client(), f"{self.url}{path}", source="prometheus", timeout=self.timeout,
                                  limit=MAX_ANSWER, params=params, loads=loads, watch=watch)  # type: ignore[arg-type]
        except SignalError as e:
            raise self._error(ReportError(e.message)) from None

    async def count_series(self, selectors: Sequence[str], start: float, end: float) -> int:
        """How many series the selectors match in [start, end] (from the index, no samples)."""
        return len(await self.series(selectors, start, end))

    async def series(self, selectors: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        """The label sets of the series the selectors match in [start, end], from the index
        (no samples read); more than max_series is a ReportError, raised as soon as that many
        have arrived, before any is decoded (SeriesCounter). Prometheus versions that know
        `limit` send no more than that."""
        params = [("match[]", s) for s in selectors] + [("start", _num(start)), ("end", _num(end)),
                                                        ("limit", str(self.max_series + 1))]
        try:
            body = await self._get("/api/v1/series", params, watch=SeriesCounter(self.max_series))
            return self._series(body, selectors)
        except TooManySeries:
            raise self._error(ReportError(_too_many(selectors, self.max_series))) from None
        except ReportError as e:
            raise self._error(e) from None

    def _series(self, body: Any, selectors: Sequence[str]) -> list[dict[str, str]]:
        try:
            if body.get("status") != "success" or not isinstance(body.get("data"), list):
                raise ReportError(f"answered an error listing series: "
                                  f"{brief(body.get('error') or body)}")
        except AttributeError:
            raise ReportError(f"answered something that is not a series list: {brief(body)}") from None
        found = [labels for labels in body["data"] if isinstance(labels, dict)
                 and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())]
        if len(found) > self.max_series:
            raise ReportError(_too_many(selectors, self.max_series))
        return found

    async def instant(self, query: str, t: float) -> list[tuple[dict[str, str], Any]]:
        body = await self._get("/api/v1/query", {"query": query, "time": _num(t)})
        try:
            return vector(body)
        except ReportError as e:
            raise self._error(e) from None

    async def range(self, query: str, start: float, end: float, step: int) -> list[RangeSeries]:
        body = await self._get("/api/v1/query_range", {"query": query, "start": _num(start), "end": _num(end),
                                                       "step": str(step)}, loads_range)
        try:
            return matrix(body)
        except ReportError as e:
            raise self._error(e) from None

    def page_steps(self, series: int) -> int:
        """Steps per page for `series` series: at most max_samples points in an answer."""
        return max(1, min(MAX_POINTS_PER_SERIES, self.max_samples // max(series, 1)))

    async def pages(self, queries: Mapping[str, str], selectors: Sequence[str], start: float, end: float,
                    step: int) -> AsyncIterator[tuple[float, float, list[RangeSeries]]]:
        """The queries' answers from `start` to `end` (both on the step grid), page by page:
        (first step, last step, the series of every query, each labelled `field` with its
        query's key). The series of a window of Prometheus's most points a series are counted
        first (`selectors`) and bound the length of each page inside it (its series are some
        of the window's); a page that would reach past it counts a window from its start."""
        window: tuple[float, int] | None = None  # the last window counted: its last step, its series

        async def page(t: float) -> tuple[float, float, list[RangeSeries]]:
            nonlocal window
            series = 1
            if selectors:
                if window is None or min(end, t + (self.page_steps(window[1]) - 1) * step) > window[0]:
                    probe_end = min(end, t + MAX_POINTS_PER_SERIES * step)
                    window = (probe_end, await self.count_series(selectors, t, probe_end))
                series = window[1]
            last = min(end, t + (self.page_steps(series) - 1) * step)
            found = []
            # the page's queries at once: Prometheus evaluates each on a core of its own
            for key, answer in zip(queries, await _all(self.range(query, t, last, step) for query in queries.values()),
                                   strict=True):
                for s in answer:
                    s.labels["field"] = key
                    found.append(s)
            return t, last, found

        # the next page is asked for while the caller reads this one
        task: asyncio.Task | None = asyncio.create_task(page(start))
        try:
            while task is not None:
                first, last, found = await task
                task = asyncio.create_task(page(last + step)) if last + step <= end else None
                yield first, last, found
        finally:
            if task is not None:
                task.cancel()


async def _all(calls: Iterable[Awaitable[T]]) -> list[T]:
    """The results of `calls`, run at once; the first error is raised and the others cancelled."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


def _too_many(selectors: Sequence[str], most: int) -> str:
    return (f"more than --max-series {most} series of {', '.join(selectors)} in the window: narrow the GPU "
            "series with label matchers (the command's --gpu-matchers, the service's --prometheus-gpu-matchers) "
            "or the window")


def _num(t: float) -> str:
    return f"{t:.3f}".rstrip("0").rstrip(".")
