"""Claims on the real control plane (issue 37): the node agent's provisioner makes a hostPath
volume for a claim of the default StorageClass, the real controller-manager binds them, the pod
that mounts the claim writes there and a later pod reads it; deleting the claim deletes the
volume and its directory."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client as k8s

from gpu_reclaim_sim.api.storageclasses import DEFAULT_CLASS, PROVISIONER

from ..support.controlplane import BUSYBOX, busybox_pod, phases
from ..support.sim_cluster import wait_for

SCENARIO = {
    "name": "node-volumes", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "nodeGroups": [{"name": "disk", "count": 1, "cpu": "4", "memory": "8Gi", "images": [BUSYBOX]}],
}


def with_claim(name: str, script: str, claim: str) -> dict:
    body = busybox_pod(name, script, node="disk-1", volumeMounts=[{"name": "home", "mountPath": "/home/jovyan"}])
    body["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}]
    return body


def test_a_claim_gets_a_volume_that_outlives_its_pod_and_goes_with_the_claim(agent, core, ns):
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "home"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    # the class binds a claim once a pod that uses it is scheduled (WaitForFirstConsumer)
    wait_for(lambda: core.list_namespaced_event(
        ns, field_selector="involvedObject.name=home,reason=WaitForFirstConsumer").items, "WaitForFirstConsumer")
    assert core.read_namespaced_persistent_volume_claim("home", ns).status.phase == "Pending"
    core.create_namespaced_pod(ns, with_claim("writer", "echo kept > /home/jovyan/notes.txt", "home"))
    pvc = wait_for(lambda: (c := core.read_namespaced_persistent_volume_claim("home", ns)).status.phase == "Bound" and c,
                   "the claim bound")
    assert pvc.spec.storage_class_name == DEFAULT_CLASS  # the DefaultStorageClass admission plugin's
    assert pvc.metadata.annotations["volume.kubernetes.io/selected-node"] == "disk-1"  # the scheduler's choice
    pv = core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.metadata.name == f"pvc-{pvc.metadata.uid}"
    assert pv.metadata.annotations["pv.kubernetes.io/provisioned-by"] == PROVISIONER
    assert (pv.spec.claim_ref.name, pv.spec.claim_ref.uid) == ("home", pvc.metadata.uid)
    assert pv.spec.capacity["storage"] == "1Gi" and pv.status.phase == "Bound"
    # the real binder's mark on the claim, and the provisioner's event
    assert pvc.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
    assert wait_for(lambda: core.list_namespaced_event(
        ns, field_selector="involvedObject.name=home,reason=ProvisioningSucceeded").items, "ProvisioningSucceeded")

    assert phases(core, ns, "writer", "Succeeded")[-1] == "Succeeded"
    directory = Path(pv.spec.host_path.path)
    assert (directory / "notes.txt").read_text() == "kept\n"
    core.create_namespaced_pod(ns, with_claim("reader", "cat /home/jovyan/notes.txt", "home"))
    assert phases(core, ns, "reader", "Succeeded")[-1] == "Succeeded"
    assert agent.container_log(ns, "reader", "main") == "kept\n"

    for pod in ("writer", "reader"):
        core.delete_namespaced_pod(pod, ns)
    core.delete_namespaced_persistent_volume_claim("home", ns)

    def volume_gone() -> bool:
        try:
            core.read_persistent_volume(pv.metadata.name)
        except k8s.ApiException as e:
            return e.status == 404
        return False
    wait_for(volume_gone, "the volume deleted with its claim")
    assert not directory.exists()


def test_a_claim_of_a_class_nobody_serves_waits(agent, core, ns):
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "elsewhere"}, "spec": {
        "storageClassName": "nobody", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    core.create_namespaced_pod(ns, with_claim("waits", "true", "elsewhere"))
    wait_for(lambda: core.list_namespaced_event(ns, field_selector="involvedObject.name=elsewhere").items,
             "the controller-manager's word on the claim")
    assert core.read_namespaced_persistent_volume_claim("elsewhere", ns).status.phase == "Pending"
    assert core.read_namespaced_pod("waits", ns).status.phase == "Pending"
