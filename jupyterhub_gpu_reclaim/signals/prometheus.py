"""GPU utilization from the Prometheus HTTP API: ONE instant query per cycle for all pods.

The default query returns the three metrics read, each as it is, told apart by a `field`
label (`util`: DCGM_FI_DEV_GPU_UTIL, `engine`: DCGM_FI_PROF_GR_ENGINE_ACTIVE, `fb_used`:
DCGM_FI_DEV_FB_USED), so which one a GPU's utilization comes from (engine activity on a
MIG instance, whatever GPU_UTIL says there) is decided where every source's series are
read, gpu_readings. Grouping keeps `pod`/`namespace`, `exported_pod`/`exported_namespace`
and `pod_uid`, so the label renames of `honor_labels: false` and the device-level series of
KUBERNETES_VIRTUAL_GPUS are told apart when the answer is read (gpu_readings.holder_labels,
device_level).

A custom `query` may return plain utilization series (no `field` label): each is then read
as the utilization of one GPU, identified by its `gpu` (and `GPU_I_ID`) label.
Prometheus down, an error answer, a body over MAX_BODY["prometheus"] or one that is not
an instant vector → SignalError("prometheus", ...); a malformed series → its GPU's value
is missing.
"""

from __future__ import annotations

import logging
import math
from typing import Any


from ..oneline import brief
from ..timestamps import utcnow
from .http_source import HttpSource, SignalError, get_json
from .exporter_check import SelfChecked
from .gpu_readings import ENGINE_ACTIVE, FB_USED, GPU_UTIL, GpuReading, PodLabel, Series, readings_from_series

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.prometheus")

# Hostname (hostname on the exporter's main), UUID and vgpu tell a time-sliced GPU
# (gpu_readings.shared_devices); pod_uid a per-pod series from the device's own
BY = ("namespace, pod, exported_namespace, exported_pod, pod_uid, gpu, GPU_I_ID, Hostname, hostname, "
      "UUID, vgpu")
FIELDS = {"util": GPU_UTIL, "engine": ENGINE_ACTIVE, "fb_used": FB_USED, "": GPU_UTIL}


def default_query(matchers: str = "") -> str:
    """The default query; `matchers` (PromQL label matchers, e.g. `job="dcgm-exporter"`)
    select the series of one scrape job where several scrape the exporter."""
    selector = f"{{{matchers}}}" if matchers else ""
    return " or ".join(f'label_replace(max by ({BY}) ({name}{selector}), "field", "{field}", "", "")'
                       for field, name in FIELDS.items() if field)


DEFAULT_QUERY = default_query()


def check_matchers(matchers: str) -> str:
    """`matchers` if they can go between a selector's braces (default_query, the report's
    selectors); ValueError otherwise (Prometheus says what else is wrong with them)."""
    if any(c in matchers for c in "{}\n"):
        raise ValueError(f"label matchers only, without braces or lines (job=\"dcgm-exporter\"), not {matchers!r}")
    return matchers


def readings_from_query_result(body: Any, pod_label: PodLabel = "auto"
                               ) -> dict[tuple[str, str], GpuReading]:
    """GpuReadings from the JSON of `/api/v1/query` (see series_from_query_result)."""
    return readings_from_series(series_from_query_result(body), utcnow(), pod_label)


def series_from_query_result(body: Any) -> list[Series]:
    """The series of the JSON of `/api/v1/query` (an instant vector). An answer that
    is not one is a SignalError; a malformed series in it concerns only its own GPU: one
    whose labels cannot be read is left out, one whose time or value cannot be read
    leaves its GPU without that value (see readings_from_series)."""
    try:
        if body.get("status") != "success":
            raise SignalError("prometheus", f"query failed: {brief(body.get('errorType'))}: "
                                            f"{brief(body.get('error'))}")
        data = body["data"]
        if data["resultType"] != "vector":
            raise SignalError("prometheus", f"the query must return an instant vector, not {brief(data['resultType'])}")
        result = data["result"]
        if not isinstance(result, list):
            raise TypeError("result is not a list")
    except SignalError:
        raise
    except (AttributeError, KeyError, TypeError) as e:
        raise SignalError("prometheus", f"malformed query answer ({type(e).__name__}: {e}): {brief(body)}") from None
    series = []
    for item in result:
        labels = item.get("metric") if isinstance(item, dict) else None
        if not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
            log.warning("Prometheus: a series whose labels cannot be read, ignored: %s", brief(item))
            continue
        name = FIELDS.get(labels.get("field", ""))
        if name is None:
            continue
        pair = item.get("value")
        ts, value = pair if isinstance(pair, list) and len(pair) == 2 else (math.nan, pair)
        series.append(Series(name, labels, value, ts))
    return series


class PrometheusSignal(SelfChecked, HttpSource):
    source = "prometheus"  # the label of its errors

    def __init__(self, url: str, query: str = DEFAULT_QUERY, timeout: float = 10.0,
                 headers: dict[str, str] | None = None, pod_label: PodLabel = "auto") -> None:
        if pod_label not in ("auto", "pod", "exported_pod"):
            raise ValueError(f"pod_label must be auto, pod or exported_pod, not {pod_label!r}")
        self.url = url.rstrip("/")
        self.pod_label = pod_label
        self.query = query
        self.timeout = timeout
        self._headers = dict(headers or {})  # e.g. Authorization for a protected Prometheus
        self.queries = 0


    async def utilization(self) -> dict[tuple[str, str], GpuReading]:
        self.queries += 1
        try:
            body = await get_json(self._client(), f"{self.url}/api/v1/query", source="prometheus",
                                  timeout=self.timeout, params={"query": self.query})
        except SignalError as e:
            if e.status in (400, 422):  # a bad query: Prometheus explains it in JSON
                log.error("Prometheus rejected the query %r: %s", self.query, e.message)
            raise
        series = series_from_query_result(body)
        readings = readings_from_series(series, utcnow(), self.pod_label)
        self._self_check(series, self.pod_label, readings)
        return readings
