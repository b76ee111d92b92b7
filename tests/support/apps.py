"""The Applications the config tests parse a command line with: ours (GpuReclaim) and
jupyterhub-idle-culler's (IdleCuller), the one it is a drop-in for."""

from __future__ import annotations

from jupyterhub_idle_culler import IdleCuller

from jupyterhub_gpu_reclaim.application import GpuReclaim


def parse(argv: list[str]) -> GpuReclaim:
    app = GpuReclaim()
    app.initialize(argv)
    return app


def culler(argv: list[str]) -> IdleCuller:
    app = IdleCuller()
    app.parse_command_line(argv)
    return app
