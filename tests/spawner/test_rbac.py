"""The ClusterRole GPUReclaimSpawner needs (helm-values/rbac.yaml) is a valid Kubernetes manifest and grants the
calls the spawner makes."""

from pathlib import Path

import kubernetes_validate
import yaml
from kubernetes_validate.utils import latest_version

RBAC = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"


def test_spawner_rbac_is_valid_and_sufficient():
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    role, binding = docs
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    # list_node and list_pod_for_all_namespaces with watch (spawner/informer.py), and
    # read_priority_class (spawner/core.py)
    needed = {("", "nodes", "list"), ("", "nodes", "watch"), ("", "pods", "list"), ("", "pods", "watch"),
              ("scheduling.k8s.io", "priorityclasses", "get")}
    assert needed <= granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "NAMESPACE"}]
