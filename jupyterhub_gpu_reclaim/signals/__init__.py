"""Signals: what the reclaimer reads from the hub, the GPUs and users' servers.

Each source sits behind a small Protocol (`interfaces`) so the service can swap it and tests
can fake it:

- `HubSource` (`hub.HubSignal`): the hub's ready servers, listed as idle-culler lists them.
- `GpuSource` (`dcgm.DcgmScrapeSignal`, `prometheus.PrometheusSignal`): per-pod GPU
  utilization and framebuffer use.
- `KernelSource` (`kernels.KernelSignal`): kernels and terminals of one server.

Every failure is raised as `http_source.SignalError(source, message)`.
"""
