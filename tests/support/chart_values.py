"""The values files of helm-values/ users install with the z2jh chart, and the scopes the
service's role there grants it."""

from __future__ import annotations

from gpu_reclaim_sim.z2jh.release import BASE, HELM_VALUES, RBAC

NOT_VALUES = {RBAC.name}   # Kubernetes manifests, applied with kubectl
VARIANTS = sorted(p for p in HELM_VALUES.glob("*.yaml") if p.name not in NOT_VALUES and p != BASE)
SERVICE_SCOPES = {"list:users", "read:users:activity", "read:servers", "delete:servers",
                  "read:users:groups", "custom:gpu-reclaim:probe-tokens"}
