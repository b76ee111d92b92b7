"""GPU utilization by scraping dcgm-exporter `/metrics` endpoints directly, for clusters
without Prometheus (and the demo). Parsed with prometheus-client's parser.

Failure semantics: the URLs are scraped concurrently; a URL that fails (HTTP error,
timeout, an answer over MAX_BODY["dcgm"]) is logged and recorded in `last_errors` as a
SignalError("dcgm", ...), and its pods are simply missing from the answer — the policy
holds sessions without data. Only when every URL fails is SignalError raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from ..oneline import brief
from ..timestamps import utcnow
from .http_source import HttpSource, SignalError, get_text
from .exporter_check import SelfChecked
from .gpu_readings import ENGINE_ACTIVE, FB_USED, GPU_UTIL, GpuReading, Series, readings_from_series

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.dcgm")

_NAMES = (GPU_UTIL, ENGINE_ACTIVE, FB_USED)

__all__ = ["DcgmScrapeSignal", "parse_dcgm_text", "series_from_text"]


def parse_dcgm_text(text: str, scraped_at: dt.datetime) -> dict[tuple[str, str], GpuReading]:
    """Readings from one exposition text, at the newest sample timestamp of each pod if
    the exporter wrote any, else `scraped_at` (see series_from_text)."""
    return readings_from_series(series_from_text(text), scraped_at)


def series_from_text(text: str) -> list[Series]:
    """The series of one exposition text.

    Only the lines of the three metrics read are parsed, each on its own: a malformed
    line is logged and left out (its GPU then has no value, so its session is held),
    and the rest of the text still counts. A text without one readable series of them
    (not an exporter's, or every line malformed) is a SignalError."""
    series = []
    for line in text.splitlines():
        if not line.startswith(_NAMES):
            continue
        try:
            samples = [(f.name, sample) for f in text_string_to_metric_families(line + "\n")
                       for sample in f.samples]
        except (ValueError, TypeError, IndexError) as e:
            log.warning("dcgm-exporter: a malformed line, ignored (%s): %s", e, brief(line))
            continue
        for name, sample in samples:
            if name in _NAMES:
                series.append(Series(name, sample.labels, sample.value, sample.timestamp))
    if not series:
        raise SignalError("dcgm", f"no {GPU_UTIL}, {ENGINE_ACTIVE} or {FB_USED} series in {brief(text)}")
    return series


class DcgmScrapeSignal(SelfChecked, HttpSource):
    """Scrapes each dcgm-exporter URL (one per GPU node, usually) once per call."""

    source = "dcgm"  # the label of its errors

    def __init__(self, urls: Sequence[str] | str, timeout: float = 5.0) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("at least one dcgm-exporter URL is needed")
        self.timeout = timeout
        self.last_errors: list[SignalError] = []

    async def _scrape(self, url: str) -> list[Series]:
        return series_from_text(await get_text(self._client(), url, source="dcgm", timeout=self.timeout))

    async def utilization(self) -> dict[tuple[str, str], GpuReading]:
        results = await asyncio.gather(*(self._scrape(u) for u in self.urls), return_exceptions=True)
        readings: dict[tuple[str, str], GpuReading] = {}
        errors: list[SignalError] = []
        scraped = []
        for url, result in zip(self.urls, results, strict=True):
            if isinstance(result, SignalError):
                log.warning("dcgm-exporter %s: %s", url, result.message)
                errors.append(result)
            elif isinstance(result, BaseException):
                raise result
            else:
                scraped += result
                readings.update(readings_from_series(result, utcnow()))
        self._self_check(scraped)
        self.last_errors = errors
        if errors and len(errors) == len(self.urls):
            raise SignalError("dcgm", "; ".join(e.message for e in errors))
        return readings

