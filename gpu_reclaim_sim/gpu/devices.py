"""A simulated node's GPUs as the device plugin hands them out: the physical GPU (`Gpu`) and
what one pod gets of it (`Device`: the whole GPU, a MIG instance or a time-slicing replica),
each with the last sample dcgm-exporter took of it. `gpus.GpuFleet` keeps them;
`dcgm_exporter` writes their series."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Gpu:
    """A physical GPU and the last sample dcgm-exporter took of the whole device."""

    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    util: float = 0.0
    engine_active: float = 0.0
    fb_used: int = 0


@dataclass(eq=False)
class Device:
    """What the device plugin hands one pod: a whole GPU, a MIG instance or a replica."""

    gpu: Gpu
    id: str  # the plugin's device ID: the GPU's UUID, MIG-<uuid>, or <uuid>::<replica>
    uuid: str  # what NVIDIA_VISIBLE_DEVICES names: the MIG UUID, else the physical GPU's
    memory_mib: int  # the framebuffer the pod may use: a MIG instance has its own share
    instance: int | None = None  # MIG: the GPU instance (GPU_I_ID)
    profile: str = ""  # MIG: GPU_I_PROFILE
    replica: int | None = None  # time-slicing: which replica of its GPU
    pod: tuple[str, str, str] | None = None  # (namespace, name, container)
    pod_uid: str = ""  # the holder's metadata.uid (dcgm-exporter's pod_uid)
    # a MIG instance's own last sample (a whole GPU or a replica reads its GPU's)
    util: float = 0.0
    engine_active: float = 0.0
    fb_used: int = 0
