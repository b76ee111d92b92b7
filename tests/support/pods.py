"""A pod on the simulated cluster as kubectl reports it (the live tests ask the cluster,
not the service, what became of a pod)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def pod_phase(sim, name: str) -> str | None:
    kubectl = Path(sys.executable).with_name("kubectl")
    out = subprocess.run([str(kubectl), "--kubeconfig", sim.info["kubeconfig"], "get", "pod", "-n", "jhub",
                          name, "-o", "json"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        assert "NotFound" in out.stderr, out.stderr
        return None
    pod = json.loads(out.stdout)
    conds = {c["type"]: c for c in pod["status"].get("conditions", [])}
    if conds.get("PodScheduled", {}).get("status") == "False":
        return "Unschedulable"
    return pod["status"]["phase"]
