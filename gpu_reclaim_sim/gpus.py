"""Simulated NVIDIA GPUs: which pod holds which GPU, how busy each one is, and the
metrics dcgm-exporter would publish for them.

Like the real device plugin, each allocated GPU is a whole device with a UUID; the pod
sees them in NVIDIA_VISIBLE_DEVICES. Like dcgm-exporter, values are sampled every
`collectionInterval`, so a scrape can lag the truth by up to one interval, and an idle
GPU's GR_ENGINE_ACTIVE shows a small noise floor rather than an exact 0.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from .scenario import Scenario


@dataclass
class Load:
    """What a pod's work does to its GPUs: `utilization` percent until `until` (monotonic)."""

    utilization: float = 0.0
    until: float = 0.0
    memory_mib: int = 0  # framebuffer held; stays after the work ends, as PyTorch's cache does


@dataclass
class Gpu:
    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    pod: tuple[str, str, str] | None = None  # (namespace, name, container)
    # the last sample dcgm-exporter took
    util: float = 0.0
    engine_active: float = 0.0
    fb_used: int = 0


@dataclass
class GpuFleet:
    scenario: Scenario
    gpus: dict[str, list[Gpu]] = field(default_factory=dict)  # node -> its GPUs
    loads: dict[tuple[str, str], Load] = field(default_factory=dict)  # (ns, pod) -> load
    _task: asyncio.Task | None = None

    # --- devices -------------------------------------------------------------------

    def add_node(self, node: str, count: int, model: str, memory_mib: int) -> None:
        self.gpus[node] = [
            Gpu(node, i, f"GPU-{uuid.uuid4()}", model, memory_mib) for i in range(count)
        ]

    def remove_node(self, node: str) -> None:
        self.gpus.pop(node, None)

    def allocate(self, node: str, namespace: str, pod: str, container: str, count: int) -> list[Gpu]:
        """Give the pod `count` free GPUs of the node (the scheduler made sure they exist)."""
        if count <= 0:
            return []
        free = self.free(node)
        if len(free) < count:
            raise RuntimeError(f"{node}: {count} GPU(s) asked, {len(free)} free")
        for g in free[:count]:
            g.pod = (namespace, pod, container)
        self.loads.setdefault((namespace, pod), Load())
        return free[:count]

    def free(self, node: str) -> list[Gpu]:
        return [g for g in self.gpus.get(node, []) if g.pod is None]

    def release(self, namespace: str, pod: str) -> None:
        for gpus in self.gpus.values():
            for g in gpus:
                if g.pod and g.pod[:2] == (namespace, pod):
                    g.pod = None
        self.loads.pop((namespace, pod), None)

    def pod_gpus(self, namespace: str, pod: str) -> list[Gpu]:
        return [g for gpus in self.gpus.values() for g in gpus if g.pod and g.pod[:2] == (namespace, pod)]

    # --- load ----------------------------------------------------------------------

    def set_load(self, namespace: str, pod: str, utilization: float, seconds: float,
                 memory_mib: int | None = None) -> Load:
        """The pod's GPUs work at `utilization` percent for `seconds`, then go idle."""
        if not 0 <= utilization <= 100:
            raise ValueError("utilization is a percentage between 0 and 100")
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        gpus = self.pod_gpus(namespace, pod)
        if not gpus:
            raise KeyError(f"pod {namespace}/{pod} holds no GPU")
        load = self.loads.setdefault((namespace, pod), Load())
        load.utilization = float(utilization)
        load.until = time.monotonic() + seconds
        if memory_mib is not None:
            if not 0 <= memory_mib <= gpus[0].memory_mib:
                raise ValueError(f"memory_mib must lie between 0 and {gpus[0].memory_mib}")
            load.memory_mib = int(memory_mib)
        elif utilization > 0 and not load.memory_mib:
            load.memory_mib = gpus[0].memory_mib // 4
        self.sample()
        return load

    def sample(self) -> None:
        """Take a sample of every GPU, as dcgm-exporter does each collection interval."""
        now = time.monotonic()
        floor = self.scenario.gpu_idle_engine_active
        for gpus in self.gpus.values():
            for g in gpus:
                load = self.loads.get(g.pod[:2]) if g.pod else None
                g.util = load.utilization if load is not None and load.until > now else 0.0
                g.engine_active = max(floor, g.util / 100)
                g.fb_used = load.memory_mib if load else 0

    async def start(self) -> None:
        self.sample()
        self._task = asyncio.create_task(self._sampler())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.scenario.gpu_collection_interval)
            self.sample()

    # --- metrics -------------------------------------------------------------------

    def metrics(self, node: str | None = None) -> bytes:
        """dcgm-exporter's text exposition for one node, or for the whole cluster."""
        registry = CollectorRegistry()
        registry.register(_DcgmCollector(self, node))
        return generate_latest(registry)

    def state(self) -> list[dict]:
        """Every GPU with its holder and last sample, for the control API."""
        return [
            {"node": g.node, "gpu": g.index, "uuid": g.uuid, "model": g.model,
             "pod": "/".join(g.pod[:2]) if g.pod else None,
             "utilization": g.util, "engine_active": g.engine_active, "fb_used_mib": g.fb_used}
            for gpus in self.gpus.values() for g in gpus
        ]


class _DcgmCollector:
    """The three fields we simulate, labelled as dcgm-exporter does in Kubernetes mode."""

    def __init__(self, fleet: GpuFleet, node: str | None) -> None:
        self.fleet, self.node = fleet, node

    def _gpus(self) -> Iterator[Gpu]:
        for node, gpus in sorted(self.fleet.gpus.items()):
            if self.node is None or node == self.node:
                yield from gpus

    def collect(self):
        base = ["gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
        families = [
            (GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=base + ["container", "namespace", "pod"]), "util"),
            (GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=base + ["container", "namespace", "pod"]), "fb_used"),
            (GaugeMetricFamily("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", labels=base + ["container", "namespace", "pod"]), "engine_active"),
        ]
        driver = self.fleet.scenario.gpu_driver_version
        for g in self._gpus():
            ns, pod, container = g.pod if g.pod else ("", "", "")
            labels = [str(g.index), g.uuid, f"nvidia{g.index}", g.model, g.node, driver, container, ns, pod]
            for family, attr in families:
                family.add_metric(labels, getattr(g, attr))
        for family, _ in families:
            yield family
