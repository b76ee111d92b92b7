"""Signals: what the reclaimer reads from the hub, the GPUs and users' servers.

Each source sits behind a small Protocol so the service can swap it and tests can fake it:

- `HubSource` (`hub.HubSignal`): the hub's ready servers, listed as idle-culler lists them.
- `GpuSource` (`dcgm.DcgmScrapeSignal`, `prometheus.PrometheusSignal`): per-pod GPU
  utilization and framebuffer use.
- `KernelSource` (`kernels.KernelSignal`): kernels and terminals of one server.

Every failure is raised as `SignalError(source, message)`.
"""

from __future__ import annotations

from .base import SignalError
from .interfaces import GpuSource, HubSource, KernelSource

__all__ = ["SignalError", "HubSource", "GpuSource", "KernelSource"]
