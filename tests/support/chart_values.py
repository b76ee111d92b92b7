"""The values files of helm-values/ users install with the z2jh chart, the scopes the
service's role there grants it, and the service's settings a variant's options give."""

from __future__ import annotations

import yaml

from gpu_reclaim_sim.z2jh.release import BASE, HELM_VALUES, RBAC
from jupyterhub_gpu_reclaim.application import GpuReclaim

NOT_VALUES = {RBAC.name}   # Kubernetes manifests, applied with kubectl
VARIANTS = sorted(p for p in HELM_VALUES.glob("*.yaml") if p.name not in NOT_VALUES and p != BASE)
SERVICE_SCOPES = {"list:users", "read:users:activity", "read:servers", "delete:servers",
                  "read:users:groups", "custom:gpu-reclaim:probe-tokens"}


def _values(name: str) -> dict:
    return yaml.safe_load((HELM_VALUES / name).read_text()) or {}


def variant_options(name: str) -> dict:
    """The service's options (custom.gpuReclaim.options) of helm-values/`name`."""
    return ((_values(name).get("custom") or {}).get("gpuReclaim") or {}).get("options") or {}


def hub_side(name: str) -> bool:
    """Whether the variant changes the hub's values (hub.*), not only the service's options."""
    return "hub" in _values(name)


def expected_settings(options: dict) -> dict:
    """The service's settings `options` give (parsed as the service parses its command
    line; a null drops the option, leaving the default), durations in seconds."""
    app, defaults = GpuReclaim(), GpuReclaim()
    app.parse_command_line([f"--{k}={v}" for k, v in options.items() if v is not None
                            for v in (v if isinstance(v, list) else [v])])
    out = {}
    for key, value in options.items():
        name = key.replace("-", "_")
        out[name] = getattr(defaults if value is None else app, name)
    return {k: (v.total_seconds() if hasattr(v, "total_seconds") else v) for k, v in out.items()}
