"""GPUReclaimSpawner under the RBAC the project ships: the hub ServiceAccount's token, the z2jh
chart's own hub Role (rendered by Helm's SDK from ../shared/z2jh/chart) and
helm-values/rbac.yaml, on the simulated cluster with RBAC enforced. The spawn timings
annotation is written; without rbac.yaml's `patch` rule the API server refuses it with its
real 403, and only the hub's log says so."""

from __future__ import annotations

import json
import re
import subprocess
import types
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from gpu_reclaim_sim.z2jh import release as z2jh
from jupyterhub_gpu_reclaim.spawner.core import TIMINGS_ANNOTATION

from ..support.live import api_fixture, start_test_hub
from ..support.sim_cluster import KUBECTL

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "helm-values" / "rbac.yaml"
HUB_USER = "system:serviceaccount:jhub:hub"


def test_spawner_rbac_is_valid_and_covers_the_spawners_calls():
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    granted = {(group, resource, verb, doc["kind"]) for doc in docs if "rules" in doc for rule in doc["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    # patch_namespaced_pod (spawner/core.py: the timings annotation), in the namespace only
    assert ("", "pods", "patch", "Role") in granted
    # list_node and list_pod_for_all_namespaces with watch (spawner/informer.py), read_priority_class
    assert {("", "nodes", "list", "ClusterRole"), ("", "nodes", "watch", "ClusterRole"),
            ("", "pods", "list", "ClusterRole"), ("", "pods", "watch", "ClusterRole"),
            ("scheduling.k8s.io", "priorityclasses", "get", "ClusterRole")} <= granted
    for doc in docs:
        if doc["kind"].endswith("Binding"):
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "NAMESPACE"}]


# --- live: the spawner with the hub's token --------------------------------------------------

def chart_hub_rbac() -> list[dict]:
    """The hub's ServiceAccount, Role and RoleBinding as `helm install jhub -n jhub` renders
    them with helm-values/gpu-reclaim.yaml."""
    docs = z2jh.render(z2jh.BASE)
    return [z2jh.find(docs, kind, "hub") for kind in ("ServiceAccount", "Role", "RoleBinding")]


def kubectl(sim, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(KUBECTL), "--kubeconfig", sim.info["kubeconfig"], *args], input=stdin,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 or not check, proc.stderr
    return proc


def ours() -> str:
    return RBAC.read_text().replace("NAMESPACE", "jhub")


@pytest.fixture(scope="module")
def hub(sim, tmp_path_factory):
    """A test hub whose Kubernetes client is the hub ServiceAccount's token on the HTTPS
    port: the chart's Role and rbac.yaml are all it may do."""
    kubectl(sim, "apply", "-n", "jhub", "-f", "-", stdin=yaml.safe_dump_all(chart_hub_rbac()))
    kubectl(sim, "apply", "-f", "-", stdin=ours())
    token = kubectl(sim, "create", "token", "hub", "-n", "jhub", "--duration=2h").stdout.strip()
    workdir = tmp_path_factory.mktemp("hub-sa")
    kubeconfig = workdir / "hub-sa.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "sim", "cluster": {"server": sim.info["api_secure"],
                                                 "certificate-authority": sim.info["ca_file"]}}],
        "users": [{"name": "hub", "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "sim", "user": "hub", "namespace": "jhub"}}]}))
    as_hub = types.SimpleNamespace(info={**sim.info, "kubeconfig": str(kubeconfig)})
    child = start_test_hub(workdir, REPO / "tests" / "spawner" / "jupyterhub_config_spawner.py", as_hub)
    yield child
    child.stop(grace=60)


api = api_fixture("module")


def pod_annotations(sim, name: str) -> dict:
    pod = json.loads(kubectl(sim, "get", "pod", name, "-n", "jhub", "-o", "json").stdout)
    return pod["metadata"].get("annotations") or {}


def can_hub_patch_pods(sim) -> str:
    return kubectl(sim, "auth", "can-i", "patch", "pods", "-n", "jhub", f"--as={HUB_USER}", check=False).stdout.strip()


@pytest.mark.integration
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.skipif(z2jh.missing() is not None, reason=z2jh.missing() or "")
async def test_the_spawner_annotates_its_pods_with_the_chart_role_and_rbac_yaml(hub, sim, api):
    assert can_hub_patch_pods(sim) == "yes"
    await api.start("alice", "cpu")
    await api.wait_ready("alice")
    timings = json.loads(pod_annotations(sim, "jupyter-alice")[TIMINGS_ANNOTATION])
    assert timings["phases"]["total"] >= 0 and timings["created"] <= timings["ready"]  # (times to the second)
    assert "could not annotate" not in hub.log_path.read_text(errors="replace")


@pytest.mark.integration
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.skipif(z2jh.missing() is not None, reason=z2jh.missing() or "")
async def test_without_the_patch_rule_the_annotation_is_refused_with_the_apiservers_403(hub, sim, api):
    patch_rule = [d for d in yaml.safe_load_all(ours()) if d["kind"] in ("Role", "RoleBinding")]
    kubectl(sim, "delete", "-f", "-", stdin=yaml.safe_dump_all(patch_rule))
    assert can_hub_patch_pods(sim) == "no"
    await api.start("bob", "cpu")
    await api.wait_ready("bob")
    assert TIMINGS_ANNOTATION not in pod_annotations(sim, "jupyter-bob")
    log = hub.log_path.read_text(errors="replace")
    assert "could not annotate jupyter-bob with its spawn timings: (403)" in log
    bodies = [json.loads(b) for b in re.findall(r"HTTP response body: (\{.*\})", log)]
    assert {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
            "code": 403, "details": {"name": "jupyter-bob", "kind": "pods"},
            "message": f'pods "jupyter-bob" is forbidden: User "{HUB_USER}" cannot patch resource "pods" in API '
                       'group "" in the namespace "jhub"'} in bodies
