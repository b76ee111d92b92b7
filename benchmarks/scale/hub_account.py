"""The hub's identity in benchmarks/sim_scale.py: the ServiceAccount `hub` with the z2jh
chart's hub Role, and a kubeconfig with its token."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpu_reclaim_sim.launch import Child

from benchmarks.scale.scene import NAMESPACE

SERVICE_ACCOUNT = "hub"
HUB_ROLE_RULES = [  # the z2jh chart's hub Role (jupyterhub/templates/hub/rbac.yaml)
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
     "verbs": ["get", "watch", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


def service_account_kubeconfig(sim: Child, workdir: Path) -> Path:
    """A kubeconfig for the ServiceAccount `hub` of NAMESPACE on the simulator's HTTPS port,
    bound through a Role with the z2jh chart's hub rules: every request of the benchmark is
    authenticated by its token and authorized by RBAC, as a hub's requests are. Set up with
    kubectl and the admin kubeconfig."""
    import subprocess

    kubectl = [str(Path(sys.executable).with_name("kubectl")), "--kubeconfig", sim.info["kubeconfig"],
               "-n", NAMESPACE]
    rbac = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": SERVICE_ACCOUNT},
             "rules": HUB_ROLE_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": SERVICE_ACCOUNT},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
             "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]}]
    subprocess.run(kubectl + ["apply", "-f", "-"], input="\n---\n".join(json.dumps(d) for d in rbac),
                   check=True, capture_output=True, text=True, timeout=60)
    token = subprocess.run(kubectl + ["create", "token", SERVICE_ACCOUNT, "--duration=6h"], check=True,
                           capture_output=True, text=True, timeout=60).stdout.strip()
    path = workdir / "hub-sa.kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "sim", "cluster": {"server": sim.info["api_secure"],
                                                 "certificate-authority": sim.info["ca_file"]}}],
        "users": [{"name": "hub", "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "sim", "user": "hub", "namespace": NAMESPACE}}]}))
    return path
