"""Simulated NVIDIA GPUs: which pod holds which device, how busy each GPU is, and the
metrics dcgm-exporter would publish for them.

Like the device plugin, a node hands out its GPUs under one resource (scenario.GpuSharing):
whole GPUs (`nvidia.com/gpu`; the pod sees their UUIDs in NVIDIA_VISIBLE_DEVICES), MIG
instances (`nvidia.com/mig-<profile>`; the pod sees `MIG-<uuid>`), or time-slicing replicas
(`nvidia.com/gpu`, or `nvidia.com/gpu.shared` with renameByDefault: the plugin's
`<uuid>::<n>`, the physical UUID to the pod; several pods on one GPU). Like dcgm-exporter,
values are sampled every `collectionInterval`, so a scrape can lag the truth by up to one
interval, and an idle GPU's GR_ENGINE_ACTIVE shows a small noise floor rather than an exact
0. The exporter's series are in `dcgm_exporter`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest

from .dcgm_exporter import DcgmCollector
from .devices import Device, Gpu
from ..scenario import GpuSharing, Scenario


@dataclass
class Load:
    """What a pod's work does to its GPUs: `utilization` percent until `until` (monotonic)."""

    utilization: float = 0.0
    until: float = 0.0
    memory_mib: int = 0  # framebuffer held; stays after the work ends, as PyTorch's cache does


def _devices(g: Gpu, sharing: GpuSharing) -> list[Device]:
    if sharing.mig_profile:
        memory = min(g.memory_mib, int(sharing.mig_profile.split(".")[1][:-2]) * 1024)  # 1g.10gb: 10 GB
        ids = [f"MIG-{uuid.uuid4()}" for _ in range(sharing.mig_per_gpu)]
        return [Device(g, mig, mig, memory, instance=i + 1, profile=sharing.mig_profile)
                for i, mig in enumerate(ids)]
    if sharing.time_sliced:
        return [Device(g, f"{g.uuid}::{r}", g.uuid, g.memory_mib, replica=r) for r in range(sharing.replicas)]
    return [Device(g, g.uuid, g.uuid, g.memory_mib)]


@dataclass
class GpuFleet:
    scenario: Scenario
    gpus: dict[str, list[Gpu]] = field(default_factory=dict)  # node -> its GPUs
    devices: dict[str, list[Device]] = field(default_factory=dict)  # node -> what its plugin hands out
    resources: dict[str, str] = field(default_factory=dict)  # node -> the resource of its devices
    loads: dict[tuple[str, str], Load] = field(default_factory=dict)  # (ns, pod) -> load
    _task: asyncio.Task | None = None

    # --- devices -------------------------------------------------------------------

    def add_node(self, node: str, count: int, model: str, memory_mib: int,
                 sharing: GpuSharing | None = None) -> None:
        sharing = sharing or GpuSharing()
        self.gpus[node] = [Gpu(node, i, f"GPU-{uuid.uuid4()}", model, memory_mib) for i in range(count)]
        self.devices[node] = [d for g in self.gpus[node] for d in _devices(g, sharing)]
        self.resources[node] = sharing.resource

    def remove_node(self, node: str) -> None:
        self.gpus.pop(node, None)
        self.devices.pop(node, None)
        self.resources.pop(node, None)

    def allocate(self, node: str, namespace: str, pod: str, container: str, count: int,
                 uid: str = "") -> list[Device]:
        """Give the pod `count` free devices of the node (the scheduler made sure they exist).
        Replicas are spread over the GPUs with the fewest held, as the plugin's distributed
        allocation does; so two pods share a GPU only once every GPU has a holder."""
        if count <= 0:
            return []
        free = self.free(node)
        if len(free) < count:
            raise RuntimeError(f"{node}: {count} GPU(s) asked, {len(free)} free")
        if free[0].replica is None:
            chosen = free[:count]
        else:
            held = Counter(d.gpu.index for d in self.devices[node] if d.pod is not None)
            chosen = []
            for _ in range(count):
                d = min((d for d in free if d not in chosen), key=lambda d: held[d.gpu.index])
                held[d.gpu.index] += 1
                chosen.append(d)
        for d in chosen:
            d.pod, d.pod_uid = (namespace, pod, container), uid
        self.loads.setdefault((namespace, pod), Load())
        return chosen

    def free(self, node: str) -> list[Device]:
        return [d for d in self.devices.get(node, []) if d.pod is None]

    def release(self, namespace: str, pod: str) -> None:
        for devices in self.devices.values():
            for d in devices:
                if d.pod and d.pod[:2] == (namespace, pod):
                    d.pod, d.pod_uid = None, ""
        self.loads.pop((namespace, pod), None)

    def pod_gpus(self, namespace: str, pod: str) -> list[Device]:
        return [d for devices in self.devices.values() for d in devices if d.pod and d.pod[:2] == (namespace, pod)]

    # --- load ----------------------------------------------------------------------

    def set_load(self, namespace: str, pod: str, utilization: float, seconds: float,
                 memory_mib: int | None = None) -> Load:
        """The pod's GPUs work at `utilization` percent for `seconds`, then go idle."""
        if not 0 <= utilization <= 100:
            raise ValueError("utilization is a percentage between 0 and 100")
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        devices = self.pod_gpus(namespace, pod)
        if not devices:
            raise KeyError(f"pod {namespace}/{pod} holds no GPU")
        load = self.loads.setdefault((namespace, pod), Load())
        load.utilization = float(utilization)
        load.until = time.monotonic() + seconds
        if memory_mib is not None:
            if not 0 <= memory_mib <= devices[0].memory_mib:
                raise ValueError(f"memory_mib must lie between 0 and {devices[0].memory_mib}")
            load.memory_mib = int(memory_mib)
        elif utilization > 0 and not load.memory_mib:
            load.memory_mib = devices[0].memory_mib // 4
        self.sample()
        return load

    def sample(self) -> None:
        """Take a sample of every GPU, as dcgm-exporter does each collection interval: a
        MIG instance shows its own pod's work; a GPU shows all its pods' work together."""
        now = time.monotonic()
        floor = self.scenario.gpu_idle_engine_active

        def work(pod: tuple[str, str] | None) -> tuple[float, int]:
            load = self.loads.get(pod) if pod else None
            if load is None:
                return 0.0, 0
            return (load.utilization if load.until > now else 0.0), load.memory_mib

        for node, gpus in self.gpus.items():
            devices = self.devices.get(node, [])
            for g in gpus:
                mine = [d for d in devices if d.gpu is g]
                for d in mine:
                    d.util, d.fb_used = work(d.pod[:2] if d.pod else None)
                    d.engine_active = max(floor, d.util / 100)
                pods = {d.pod[:2] for d in mine if d.pod}
                if mine and mine[0].instance is not None:  # MIG: the instances add up
                    used = [(d.util, d.fb_used) for d in mine]
                else:  # time-sliced pods take turns: their work adds up, to 100 % at most
                    used = [work(p) for p in pods]
                g.util = min(100.0, sum(u for u, _ in used))
                g.engine_active = max(floor, g.util / 100)
                g.fb_used = min(g.memory_mib, sum(m for _, m in used))

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
        registry.register(DcgmCollector(self, node))
        return generate_latest(registry)

    def state(self) -> list[dict]:
        """Every device with its holder and last sample (its GPU's, but for a MIG
        instance), for the control API."""
        out = []
        for devices in self.devices.values():
            for d in devices:
                own = d if d.instance is not None else d.gpu
                entry = {"node": d.gpu.node, "gpu": d.gpu.index, "uuid": d.uuid, "model": d.gpu.model,
                         "pod": "/".join(d.pod[:2]) if d.pod else None,
                         "utilization": own.util, "engine_active": own.engine_active, "fb_used_mib": own.fb_used}
                if d.instance is not None:
                    entry.update(mig_instance=d.instance, mig_profile=d.profile)
                if d.replica is not None:
                    entry["replica"] = d.replica
                out.append(entry)
        return out
