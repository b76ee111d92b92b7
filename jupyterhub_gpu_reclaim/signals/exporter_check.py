"""The start-up self-check of the GPU signal: what the first answer of dcgm-exporter (or of
Prometheus on its behalf) shows about the exporter's version and mode, and which of the
reading rules of `gpu_readings` apply to it, as typed findings the signal writes to the
log once (docs/policy.md, "What the service reads from each dcgm-exporter")."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..timestamps import utcnow
from .gpu_readings import (
    ENGINE_ACTIVE,
    FB_USED,
    GPU_UTIL,
    HOSTNAME,
    MIG_INSTANCE,
    NO_HOSTPID,
    POD_UID,
    VGPU,
    GpuReading,
    PodLabel,
    Series,
    device_level,
    holder_labels,
    readings_from_series,
)

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.gpu")

# the exporter's own labels worth naming (the rest are Prometheus's or the pods' own)
EXPORTER_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", *HOSTNAME, MIG_INSTANCE,
                   "GPU_I_PROFILE", "pod", "namespace", "container", POD_UID, VGPU)
EXPORTED = ("exported_pod", "exported_namespace", "exported_container")


@dataclass(frozen=True)
class ExporterFinding:
    """One line of the self-check. `code` names what was found (stable, for tests and
    tools): "fields", "labels", "exported-labels", "mig", "mig-gpu-util",
    "mig-without-engine", "virtual-gpus", "device-level-series", "no-hostpid",
    "namespace-renamed-alone". `warning`: some sessions' GPU values are missing because
    of it, or it is worth the admin's look."""

    code: str
    line: str
    warning: bool = False


def exporter_self_check(series: Sequence[Series], pod_label: PodLabel = "auto", t: dt.datetime | None = None,
                        readings: Mapping[tuple[str, str], GpuReading] | None = None) -> list[ExporterFinding]:
    """The findings of one answer's series (empty: nothing to tell yet). `readings`: those of
    these series (`readings_from_series`) where the caller has read them already (at 20,000
    servers reading them again took a tenth of the first cycle's extra CPU)."""
    if not series:
        return []
    found: list[ExporterFinding] = []
    names = sorted({s.name for s in series})
    labels = set().union(*(s.labels.keys() for s in series))
    found.append(ExporterFinding("fields", "fields: " + ", ".join(names)))
    found.append(ExporterFinding("labels", "exporter labels: " + ", ".join(
        k for k in EXPORTER_LABELS if k in labels)))
    pod_key, ns_key = holder_labels((s.labels for s in series), pod_label)
    exported = [k for k in EXPORTED if k in labels]
    if exported:
        found.append(ExporterFinding("exported-labels", f"renamed by Prometheus (honor_labels: false): "
                                     f"{', '.join(exported)}; the holder is read from {pod_key}, {ns_key}"))
    if ns_key == "exported_namespace" and pod_key == "pod":
        found.append(ExporterFinding("namespace-renamed-alone", "the scrape job labels its target with "
                                     "namespace but not pod: the holder is read from pod and exported_namespace"))
    mig = [s for s in series if s.labels.get(MIG_INSTANCE, "") != ""]
    if mig:
        found.append(ExporterFinding("mig", f"MIG instances: {len({_instance(s) for s in mig})}; "
                                     f"their utilization is {ENGINE_ACTIVE} x 100"))
        if any(s.name == GPU_UTIL for s in mig):
            found.append(ExporterFinding("mig-gpu-util", f"{GPU_UTIL} is written for MIG instances (0 in some "
                                         "versions: dcgm-exporter issue 216): ignored there"))
        if not any(s.name == ENGINE_ACTIVE for s in mig):
            found.append(ExporterFinding("mig-without-engine", f"no {ENGINE_ACTIVE} for MIG instances: their "
                                         "utilization is missing (add it to the exporter's counters)", True))
    per_pod = [s for s in series if s.name in (GPU_UTIL, FB_USED) and s.labels.get(POD_UID)]
    if any(s.labels.get(VGPU) for s in series) or per_pod:
        found.append(ExporterFinding("virtual-gpus", "KUBERNETES_VIRTUAL_GPUS: a series per pod of each GPU"
                                     + (" (vgpu labels: time-sliced GPUs)" if VGPU in labels else "")
                                     + ("; per-process values (4.8.2 and later), which need hostPID: true: a busy GPU whose "
                                        "pods all read 0 is missing data" if per_pod else "")))
    whole = [series[i] for i in device_level(series)]
    if whole:
        named = sorted({s.labels[pod_key] for s in whole if s.labels.get(pod_key)})
        found.append(ExporterFinding("device-level-series", f"device-level series beside the per-pod ones: "
                                     f"{len(whole)}" + (f", labelled with the exporter's pod {', '.join(named)} "
                                     "by Prometheus (honorLabels: true): never counted as a holder"
                                     if named else "")))
    if readings is None:
        readings = readings_from_series(series, t or utcnow(), pod_label)
    blind = sorted(f"{ns}/{pod}" for (ns, pod), r in readings.items() if r.problem == NO_HOSTPID)
    if blind:
        found.append(ExporterFinding("no-hostpid", f"{NO_HOSTPID}; pods: {', '.join(blind)}", True))
    return found


def _instance(s: Series) -> tuple[str, ...]:
    return tuple(s.labels.get(k, "") for k in (*HOSTNAME, "UUID", "gpu", MIG_INSTANCE))


class SelfChecked:
    """A GPU signal that runs the self-check on its first answer with series and logs it.
    `findings` is None until then."""

    findings: list[ExporterFinding] | None = None
    source = "gpu"

    def _self_check(self, series: Sequence[Series], pod_label: PodLabel = "auto",
                    readings: Mapping[tuple[str, str], GpuReading] | None = None) -> None:
        if self.findings is not None or not series:
            return
        self.findings = exporter_self_check(series, pod_label, readings=readings)
        for f in self.findings:
            log.log(logging.WARNING if f.warning else logging.INFO, "GPU self-check (%s): %s", self.source, f.line)
