"""The small interfaces behind which each signal sits, so a source can be swapped for
another (Prometheus for a direct dcgm-exporter scrape) or faked in unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .gpu_readings import GpuReading
    from .hub import HubServer
    from .kernels import Probed


@runtime_checkable
class HubSource(Protocol):
    async def ready_servers(self) -> list[HubServer]:
        """Every ready server of every user; raises SignalError("hub", ...)."""
        ...


@runtime_checkable
class GpuSource(Protocol):
    async def utilization(self) -> dict[tuple[str, str], GpuReading]:
        """GPU readings keyed by (namespace, pod); a pod absent from the answer has no
        data this cycle (the policy holds it). Raises SignalError when nothing could be read."""
        ...


@runtime_checkable
class KernelSource(Protocol):
    async def probe_all(self, user: str, server: str, server_url_path: str, direct_url: str | None) -> Probed:
        """Kernels, terminal activity and what runs in `user`'s server `server`; raises
        SignalError("kernels", ...), NoProbeCredential when it has no credential for it."""
        ...
