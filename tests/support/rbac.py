"""RBAC as the tests write it: Roles, bindings and their subjects as manifests, the z2jh
chart's hub rules, and a ServiceAccount's identity on the simulated API server (its token
on the HTTPS port, for kubectl and the official client)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.resources import BY_KIND

from .apiserver_sim import Sim
from .sim_cluster import kubectl_with

SA = BY_KIND["ServiceAccount"]
HUB = "system:serviceaccount:jhub:hub"


class Identity:
    """A ServiceAccount's token on the HTTPS port, for kubectl and the official client."""

    def __init__(self, sim: Sim, namespace: str, name: str, tmp: Path) -> None:
        if sim.call(sim.cluster.store.find, SA, namespace, name) is None:
            sim.kubectl("create", "serviceaccount", name, "-n", namespace)
        self.token = sim.kubectl("create", "token", name, "-n", namespace).stdout.strip()
        self.kubeconfig = tmp / f"{namespace}-{name}.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "sim", "cluster": sim.server.kubeconfig_cluster(secure=True)}],
            "users": [{"name": "sa", "user": {"token": self.token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": "sa", "namespace": namespace}}]}))

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        return kubectl_with(self.kubeconfig, *args, check=False)

    def can_i(self, *args: str) -> bool:
        proc = self.kubectl("auth", "can-i", *args)
        assert proc.stdout.strip() in ("yes", "no"), proc.stderr
        return proc.stdout.strip() == "yes"

    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(k8s_config.new_client_from_config(str(self.kubeconfig)))


def refused(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as e:
        call(*args, **kwargs)
    assert e.value.status == 403, e.value.body
    return json.loads(e.value.body)


def apply(sim: Sim, *docs: dict) -> None:
    sim.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def role(name: str, namespace: str, *rules: dict, kind: str = "Role") -> dict:
    meta = {"name": name, **({"namespace": namespace} if kind == "Role" else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": list(rules)}


def binding(name: str, namespace: str, role_kind: str, role_name: str, *subjects: dict,
            kind: str = "RoleBinding") -> dict:
    meta = {"name": name, **({"namespace": namespace} if kind == "RoleBinding" else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": list(subjects)}


def sa(name: str, namespace: str) -> dict:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


CHART_HUB_RULES = [  # the z2jh chart's hub Role (templates/hub/rbac.yaml)
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
     "verbs": ["get", "watch", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]
