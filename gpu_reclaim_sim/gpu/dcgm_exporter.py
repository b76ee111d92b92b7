"""The series dcgm-exporter publishes for the simulated GPUs, labelled as it does in
Kubernetes mode (its pod mapping from the kubelet's pod-resources API), as the release the
scenario names writes them (`gpu.exporterVersion`, default the current one, 4.5.3-4.8.2):

- Labels in the order of its template: gpu, UUID, pci_bus_id (from 3.3.7-3.5.0), device,
  modelName, GPU_I_PROFILE and GPU_I_ID (MIG), Hostname, the label counters
  (DCGM_FI_DRIVER_VERSION), then container, namespace, pod, pod_uid, vgpu.
- A whole GPU: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED and DCGM_FI_PROF_GR_ENGINE_ACTIVE,
  with the pod holding it; a free GPU has no pod labels (empty ones up to 3.3.3-3.3.1).
  `pod_uid` only with the exporter's --kubernetes-enable-pod-uid (`gpu.podUid`).
- A MIG instance: one series per instance with GPU_I_ID and GPU_I_PROFILE, its own
  DCGM_FI_PROF_GR_ENGINE_ACTIVE and DCGM_FI_DEV_FB_USED, and no DCGM_FI_DEV_GPU_UTIL (NVML
  has no utilization for a MIG device), or GPU_UTIL 0 with `gpu.migGpuUtil` (as some
  versions write: dcgm-exporter issue 216). The parent GPU's own series are not simulated.
- A time-sliced GPU: the whole device's values, whatever pod did the work. By default one
  series, labelled with one pod of those sharing it (the exporter's device-to-pod map keeps
  the last pod it saw; here the holder of the highest replica): the other pods have no
  series (dcgm-exporter issue 307).
- KUBERNETES_VIRTUAL_GPUS (`gpu.kubernetesVirtualGpus`, from 4.1.1-4.0.3): each series once
  per pod holding the device, a replica's with `vgpu`, with pod_uid from 4.4.0-4.5.0. From 4.5.3-4.8.2, GPU_UTIL and
  FB_USED instead keep the device's own series (no pod labels) and add one per pod with its
  own processes' values and pod_uid, which are 0 without hostPID (`gpu.hostPid: false`); a
  device no pod holds keeps its own series (before, it had none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

from prometheus_client.core import Metric

from ..scenario import exporter_release
from .devices import Device, Gpu

if TYPE_CHECKING:
    from ..scenario import Scenario

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
_HELP = {
    GPU_UTIL: "GPU utilization (in %).",
    FB_USED: "Framebuffer memory used (in MiB).",
    ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
}
PER_PROCESS = (GPU_UTIL, FB_USED)  # the exporter's isPerProcessMetric


@dataclass(frozen=True)
class Release:
    """What one release writes, from its tag."""

    empty_pod_labels: bool  # a free GPU's pod labels are "" (up to 3.3.3-3.3.1)
    pci_bus_id: bool  # from 3.3.7-3.5.0
    virtual_pod_uid: bool  # KUBERNETES_VIRTUAL_GPUS writes pod_uid on every copy (from 4.4.0-4.5.0)
    per_process: bool  # KUBERNETES_VIRTUAL_GPUS writes device-level and per-process series (4.8.2)

    @classmethod
    def of(cls, tag: str) -> Release:
        v = exporter_release(tag)
        return cls(empty_pod_labels=v < (3, 4, 0), pci_bus_id=v >= (3, 5, 0), virtual_pod_uid=v >= (4, 5, 0),
                   per_process=v >= (4, 8, 2))


def _pod_labels(d: Device | None, *, uid: bool, empty: bool) -> dict[str, str]:
    if d is None or not d.pod:
        return {"container": "", "namespace": "", "pod": ""} if empty else {}
    ns, pod, container = d.pod
    labels = {"container": container, "namespace": ns, "pod": pod}
    if uid:
        labels["pod_uid"] = d.pod_uid
    return labels


def _pci_bus_id(g: Gpu) -> str:
    return f"00000000:{0x18 + 0x10 * g.index:02X}:00.0"


class Fleet(Protocol):
    """What the exporter reads of the GPUs (gpus.GpuFleet, which imports this module)."""

    @property
    def scenario(self) -> Scenario: ...
    @property
    def gpus(self) -> dict[str, list[Gpu]]: ...
    @property
    def devices(self) -> dict[str, list[Device]]: ...


class DcgmCollector:
    def __init__(self, fleet: Fleet, node: str | None) -> None:
        self.fleet, self.node = fleet, node

    def _series(self) -> Iterator[tuple[dict[str, str], dict[str, float]]]:
        """(labels, {metric: value}) for every series of the node (or the cluster)."""
        sc: Scenario = self.fleet.scenario
        release = Release.of(sc.gpu_exporter_version)
        for node, gpus in sorted(self.fleet.gpus.items()):
            if self.node is not None and node != self.node:
                continue
            devices = self.fleet.devices.get(node, [])
            for g in gpus:
                head = {"gpu": str(g.index), "UUID": g.uuid,
                        **({"pci_bus_id": _pci_bus_id(g)} if release.pci_bus_id else {}),
                        "device": f"nvidia{g.index}", "modelName": g.model}
                tail = {"Hostname": g.node, "DCGM_FI_DRIVER_VERSION": sc.gpu_driver_version}
                mine = [d for d in devices if d.gpu is g]
                if mine and mine[0].instance is not None:  # MIG: each instance on its own
                    for d in mine:
                        values = {FB_USED: float(d.fb_used), ENGINE_ACTIVE: d.engine_active}
                        if sc.gpu_mig_gpu_util:
                            values = {GPU_UTIL: 0.0, **values}
                        labels = {**head, "GPU_I_PROFILE": d.profile, "GPU_I_ID": str(d.instance), **tail}
                        yield from self._unit(labels, values, [d], release)
                else:
                    values = {GPU_UTIL: g.util, FB_USED: float(g.fb_used), ENGINE_ACTIVE: g.engine_active}
                    yield from self._unit({**head, **tail}, values, mine, release)

    def _unit(self, labels: dict[str, str], values: dict[str, float], devices: list[Device],
              release: Release) -> Iterator[tuple[dict[str, str], dict[str, float]]]:
        """The series of one GPU or MIG instance, whose devices (its replicas) are `devices`."""
        sc = self.fleet.scenario
        holders = [d for d in devices if d.pod]
        if not sc.gpu_virtual_gpus:
            holder = holders[-1] if holders else None
            yield {**labels, **_pod_labels(holder, uid=sc.gpu_pod_uid, empty=release.empty_pod_labels)}, values
            return
        if not holders:
            if release.per_process:
                yield labels, values
            return
        if release.per_process:
            yield labels, {k: v for k, v in values.items() if k in PER_PROCESS}
        for d in holders:
            replica = {"vgpu": str(d.replica)} if d.replica is not None else {}
            if not release.per_process:
                yield {**labels, **_pod_labels(d, uid=release.virtual_pod_uid, empty=False), **replica}, values
                continue
            own = {GPU_UTIL: d.util, FB_USED: float(d.fb_used)} if sc.gpu_host_pid else {GPU_UTIL: 0.0, FB_USED: 0.0}
            yield ({**labels, **_pod_labels(d, uid=True, empty=False), **replica},
                   {k: own[k] for k in values if k in PER_PROCESS})
            yield ({**labels, **_pod_labels(d, uid=sc.gpu_pod_uid, empty=False), **replica},
                   {k: v for k, v in values.items() if k not in PER_PROCESS})

    def collect(self) -> Iterator[Metric]:
        families = {name: Metric(name, text, "gauge") for name, text in _HELP.items()}
        for labels, values in self._series():
            for name, value in values.items():
                families[name].add_sample(name, labels, value)
        yield from families.values()
