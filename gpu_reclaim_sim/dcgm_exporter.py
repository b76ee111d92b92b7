"""The series dcgm-exporter publishes for the simulated GPUs, labelled as it does in
Kubernetes mode (its pod mapping from the kubelet's pod-resources API).

- A whole GPU: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED and DCGM_FI_PROF_GR_ENGINE_ACTIVE,
  with the pod holding it (empty pod labels while none does).
- A MIG instance: one series per instance with GPU_I_ID and GPU_I_PROFILE, its own
  DCGM_FI_PROF_GR_ENGINE_ACTIVE and DCGM_FI_DEV_FB_USED, and no DCGM_FI_DEV_GPU_UTIL (NVML
  has no utilization for a MIG device). The parent GPU's own series are not simulated.
- A time-sliced GPU: the whole device's values, whatever pod did the work. By default one
  series, labelled with one pod of those sharing it (the exporter's device-to-pod map keeps
  the last pod it saw; here the holder of the highest replica): the other pods have no
  series (dcgm-exporter issue 307). With KUBERNETES_VIRTUAL_GPUS (the scenario's
  `gpu.kubernetesVirtualGpus`) a copy of each series per pod holding a replica, with the
  replica in the `vgpu` label; in that mode a device no pod holds has no series at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import Metric

if TYPE_CHECKING:
    from .gpus import Device, Gpu, GpuFleet

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
_HELP = {
    GPU_UTIL: "GPU utilization (in %).",
    FB_USED: "Framebuffer memory used (in MiB).",
    ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
}


def _pod_labels(d: Device | None) -> dict[str, str]:
    ns, pod, container = d.pod if d is not None and d.pod else ("", "", "")
    return {"container": container, "namespace": ns, "pod": pod}


class DcgmCollector:
    def __init__(self, fleet: GpuFleet, node: str | None) -> None:
        self.fleet, self.node = fleet, node

    def _series(self) -> Iterator[tuple[Gpu | Device, dict[str, str], bool]]:
        """(what is sampled, its labels, whether it has GPU_UTIL) for every series."""
        virtual = self.fleet.scenario.gpu_virtual_gpus
        driver = self.fleet.scenario.gpu_driver_version
        for node, gpus in sorted(self.fleet.gpus.items()):
            if self.node is not None and node != self.node:
                continue
            devices = self.fleet.devices.get(node, [])
            for g in gpus:
                head = {"gpu": str(g.index), "UUID": g.uuid, "device": f"nvidia{g.index}", "modelName": g.model}
                tail = {"Hostname": g.node, "DCGM_FI_DRIVER_VERSION": driver}
                mine = [d for d in devices if d.gpu is g]
                if mine and mine[0].instance is not None:
                    for d in mine:
                        if d.pod or not virtual:
                            labels = {**head, "GPU_I_PROFILE": d.profile, "GPU_I_ID": str(d.instance),
                                      **tail, **_pod_labels(d)}
                            yield d, labels, False
                    continue
                holders = [d for d in mine if d.pod]
                if virtual:
                    for d in holders:
                        extra = {"vgpu": str(d.replica)} if d.replica is not None else {}
                        yield g, {**head, **tail, **_pod_labels(d), **extra}, True
                else:
                    yield g, {**head, **tail, **_pod_labels(holders[-1] if holders else None)}, True

    def collect(self) -> Iterator[Metric]:
        families = {name: Metric(name, text, "gauge") for name, text in _HELP.items()}
        for sampled, labels, has_util in self._series():
            if has_util:
                families[GPU_UTIL].add_sample(GPU_UTIL, labels, sampled.util)
            families[FB_USED].add_sample(FB_USED, labels, sampled.fb_used)
            families[ENGINE_ACTIVE].add_sample(ENGINE_ACTIVE, labels, sampled.engine_active)
        yield from families.values()
