"""Fidelity tests of the simulated API server with real clients: kubectl, the official
`kubernetes` client and kubernetes_asyncio (what KubeSpawner uses).

The server runs in a background thread with its own event loop, on a stand-in cluster
holding only the store (no scheduler or kubelets), so sync clients and kubectl
subprocesses can talk to it from ordinary tests. Its HTTP layer (errors, TLS, response
compression): test_apiserver_http.py.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from ..support.apiserver_sim import POD, TOKEN, Sim, apiserver_fixtures, make_namespace, pod_manifest
from ..support.sim_cluster import KUBECTL

sim, core = apiserver_fixtures("apiserver")


# --- kubectl -----------------------------------------------------------------------------

def test_kubectl_get_nodes_and_discovery(sim: Sim) -> None:
    out = sim.kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert out[1].split()[:3] == ["node-1", "Ready", "<none>"]
    resources = sim.kubectl("api-resources").stdout
    for line in ("pods", "po", "Pod"), ("priorityclasses", "pc", "PriorityClass"):
        assert any(all(word in row.split() for word in line) for row in resources.splitlines()), line
    assert "Server Version: v1." in sim.kubectl("version").stdout


def test_kubectl_pod_lifecycle(sim: Sim, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod_manifest("kc-pod", containers=[{
        "name": "notebook", "image": "jupyter/base:2024",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}}}])))
    assert "pod/kc-pod created" in sim.kubectl("create", "-f", str(manifest)).stdout

    table = sim.kubectl("get", "pods", "-n", "jhub").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["kc-pod", "0/1", "Pending", "0"]

    pod = json.loads(sim.kubectl("get", "pod", "kc-pod", "-o", "json").stdout)
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}

    described = sim.kubectl("describe", "pod", "kc-pod").stdout
    assert "QoS Class:" in described and "Guaranteed" in described
    assert "node.kubernetes.io/not-ready:NoExecute op=Exists for 300s" in described

    sim.kubectl("label", "pod", "kc-pod", "tier=gpu")
    listed = sim.kubectl("get", "pods", "-l", "tier in (gpu),app", "-o", "name").stdout.split()
    assert listed == ["pod/kc-pod"]
    assert sim.kubectl("get", "pods", "-l", "!tier", "-o", "name").stdout.split() == []

    # logs need a container that has started: play the kubelet's part
    def start(o: dict[str, Any]) -> None:
        o["spec"]["nodeName"] = "node-1"
        o["status"]["containerStatuses"] = [{"name": "notebook", "ready": True, "restartCount": 0,
                                             "image": "jupyter/base:2024", "imageID": "", "state": {
                                                 "running": {"startedAt": "2024-01-01T00:00:00Z"}}}]
    sim.call(sim.cluster.store.update, POD, "jhub", "kc-pod", start)
    log = sim.cluster.pod_log_path("jhub", "kc-pod", "notebook")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("line 1\nline 2\nline 3\n")
    assert sim.kubectl("logs", "kc-pod").stdout == "line 1\nline 2\nline 3\n"
    assert sim.kubectl("logs", "kc-pod", "--tail=1").stdout == "line 3\n"
    bad = sim.kubectl("logs", "kc-pod", "-c", "nope", check=False)
    assert bad.returncode != 0 and "container nope is not valid for pod kc-pod" in bad.stderr

    deleted = sim.kubectl("delete", "pod", "kc-pod", "--grace-period=1")
    assert 'pod "kc-pod" deleted' in deleted.stdout
    assert "NotFound" in sim.kubectl("get", "pod", "kc-pod", check=False).stderr


def test_kubectl_refuses_invalid_pods(sim: Sim, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
                                   "spec": {"containers": [{"name": "c"}]}}))
    proc = sim.kubectl("create", "-f", str(bad), check=False)
    assert proc.returncode != 0
    assert 'The Pod "bad" is invalid: spec.containers[0].image: Required value' in proc.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump(pod_manifest("unk", bogus=1)))
    proc = sim.kubectl("create", "-f", str(unknown), check=False)
    assert proc.returncode != 0 and 'strict decoding error: unknown field "spec.bogus"' in proc.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(pod_manifest("typo", restartPolicy=3)))
    proc = sim.kubectl("create", "-f", str(typo), check=False)
    assert proc.returncode != 0 and "spec.restartPolicy" in proc.stderr


def test_kubectl_apply_then_patch(sim: Sim, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                                        "data": {"a": "1", "b": "2"}}))
    assert "created" in sim.kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                                        "data": {"a": "1", "c": "3"}}))
    assert "configured" in sim.kubectl("apply", "-f", str(manifest)).stdout
    cm = json.loads(sim.kubectl("get", "cm", "cfg", "-o", "json").stdout)
    assert cm["data"] == {"a": "1", "c": "3"}  # apply's three-way patch removed b
    sim.kubectl("delete", "-f", str(manifest))


def test_kubectl_imperative_creates_send_protobuf_we_understand(sim: Sim, core: k8s.CoreV1Api) -> None:
    sim.kubectl("create", "namespace", "imperative")
    sim.kubectl("-n", "imperative", "create", "configmap", "cfg", "--from-literal=a=b")
    sim.kubectl("-n", "imperative", "create", "secret", "generic", "sec", "--from-literal=k=v")
    sim.kubectl("-n", "imperative", "create", "service", "clusterip", "web", "--tcp=80:8080")
    ns = core.read_namespace("imperative")
    assert ns.status.phase == "Active" and ns.metadata.labels["kubernetes.io/metadata.name"] == "imperative"
    assert core.read_namespaced_config_map("cfg", "imperative").data == {"a": "b"}
    secret = core.read_namespaced_secret("sec", "imperative")
    assert secret.data == {"k": "dg=="} and secret.type == "Opaque"
    svc = core.read_namespaced_service("web", "imperative")
    assert (svc.spec.ports[0].port, svc.spec.ports[0].target_port) == (80, 8080)
    assert ipaddress.ip_address(svc.spec.cluster_ip) in sim.cluster.store.service_cidr


# --- the official Python client ----------------------------------------------------------

def test_python_client_crud_and_errors(sim: Sim, core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_pod("jhub", pod_manifest("py-pod"))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.spec.service_account_name == "default" and created.status.qos_class == "BestEffort"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    ns = core.read_namespace("jhub")
    assert ns.metadata.labels == {"kubernetes.io/metadata.name": "jhub"} and ns.status.phase == "Active"
    assert core.read_namespaced_pod("py-pod", "jhub").metadata.uid == created.metadata.uid

    with pytest.raises(ApiException) as dup:
        core.create_namespaced_pod("jhub", pod_manifest("py-pod"))
    assert dup.value.status == 409 and json.loads(dup.value.body)["reason"] == "AlreadyExists"

    patched = core.patch_namespaced_pod("py-pod", "jhub", {"metadata": {"labels": {"user": "alice"}}})
    assert patched.metadata.labels == {"app": "demo", "user": "alice"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)

    stale = core.read_namespaced_pod("py-pod", "jhub")
    stale.metadata.resource_version = created.metadata.resource_version
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_pod("py-pod", "jhub", stale)
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["reason"] == "Conflict"

    current = core.read_namespaced_pod("py-pod", "jhub")
    current.spec.restart_policy = "Never"
    with pytest.raises(ApiException) as forbidden:
        core.replace_namespaced_pod("py-pod", "jhub", current)
    assert forbidden.value.status == 422
    assert "pod updates may not change fields other than" in json.loads(forbidden.value.body)["message"]

    names = [p.metadata.name for p in core.list_namespaced_pod("jhub").items]
    assert "py-pod" in names
    all_pods = core.list_pod_for_all_namespaces()
    assert "py-pod" in [p.metadata.name for p in all_pods.items]

    core.delete_namespaced_pod("py-pod", "jhub")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("py-pod", "jhub")
    assert gone.value.status == 404
    assert json.loads(gone.value.body)["message"] == 'pods "py-pod" not found'


def test_python_client_gets_422_naming_the_field(core: k8s.CoreV1Api) -> None:
    body = pod_manifest("invalid", containers=[{"name": "Bad_Name", "image": "x",
                                                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}])
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("jhub", body)
    status = json.loads(err.value.body)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {"spec.containers[0].name", "spec.containers[0].resources.requests"}
    assert "must be less than or equal to cpu limit of 1" in status["message"]

    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("jhub", pod_manifest("nocontainers", containers=[]))
    assert "spec.containers: Required value" in json.loads(err.value.body)["message"]


def test_list_then_watch_sees_every_change_exactly_once(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "watchseq")
    listing = core.list_namespaced_pod("watchseq")
    assert listing.items == []
    events: list[tuple[str, str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = k8s_watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, "watchseq", resource_version=listing.metadata.resource_version,
                           timeout_seconds=5):
            events.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
            if len(events) == 6:
                w.stop()
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    core.create_namespaced_pod("watchseq", pod_manifest("a"))  # before the watch connects: replayed
    thread.start()
    core.create_namespaced_pod("watchseq", pod_manifest("b"))
    core.create_namespaced_pod("watchseq", pod_manifest("c"))
    core.patch_namespaced_pod("a", "watchseq", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("b", "watchseq")
    core.patch_namespaced_pod("c", "watchseq", {"metadata": {"annotations": {"y": "2"}}})
    assert done.wait(10)
    assert [(t, n) for t, n, _ in events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b"), ("MODIFIED", "c")]
    rvs = [int(rv) for _, _, rv in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)


def test_expired_resource_version_gets_410_and_client_relists(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "expiry")
    old_rv = core.list_namespaced_pod("expiry").metadata.resource_version
    core.create_namespaced_pod("expiry", pod_manifest("p1"))
    sim.call(sim.cluster.store.compact)
    with pytest.raises(ApiException) as err:
        for _ in k8s_watch.Watch().stream(core.list_namespaced_pod, "expiry", resource_version=old_rv,
                                          timeout_seconds=2):
            pass
    assert err.value.status == 410
    # raw: HTTP 200 with an ERROR event carrying the Status, as the real server sends
    status, body = sim.http("GET", f"/api/v1/namespaces/expiry/pods?watch=1&resourceVersion={old_rv}")
    assert status == 200 and body["type"] == "ERROR"
    assert body["object"]["code"] == 410 and body["object"]["reason"] == "Expired"
    # the client's recovery: list again and watch from the new resourceVersion
    relisted = core.list_namespaced_pod("expiry")
    assert [p.metadata.name for p in relisted.items] == ["p1"]
    core.create_namespaced_pod("expiry", pod_manifest("p2"))
    seen = [(e["type"], e["object"].metadata.name) for e in k8s_watch.Watch().stream(
        core.list_namespaced_pod, "expiry", resource_version=relisted.metadata.resource_version, timeout_seconds=1)]
    assert seen == [("ADDED", "p2")]


async def test_kubernetes_asyncio_list_watch_with_timeout(sim: Sim) -> None:
    from kubernetes_asyncio import client as aclient
    from kubernetes_asyncio import config as aconfig
    from kubernetes_asyncio import watch as awatch

    make_namespace(sim, "asyncns")
    api_client = await aconfig.new_client_from_config(config_file=str(sim.kubeconfig))
    async with api_client:
        api = aclient.CoreV1Api(api_client)
        listing = await api.list_namespaced_pod("asyncns", limit=500)
        await api.create_namespaced_pod("asyncns", pod_manifest("async-pod"))
        started = time.monotonic()
        seen = []
        async with awatch.Watch().stream(api.list_namespaced_pod, "asyncns",
                                         resource_version=listing.metadata.resource_version,
                                         timeout_seconds=1, allow_watch_bookmarks=True) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"].metadata.name
                             if event["type"] != "BOOKMARK" else None))
        elapsed = time.monotonic() - started
    assert seen[0] == ("ADDED", "async-pod")
    assert ("BOOKMARK", None) in seen  # bookmarkInterval is 0.3 s in this scenario
    assert 0.9 <= elapsed < 4, elapsed  # the server ended the stream after timeoutSeconds


def test_bookmarks_and_initial_events_end(sim: Sim) -> None:
    make_namespace(sim, "bookmarks")
    sim.call(sim.cluster.create, POD, pod_manifest("bm"), "bookmarks")
    req = urllib.request.Request(sim.url + "/api/v1/namespaces/bookmarks/pods?watch=1&allowWatchBookmarks=true"
                                 "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines()]
    assert lines[0]["type"] == "ADDED" and lines[0]["object"]["metadata"]["name"] == "bm"
    assert lines[1]["type"] == "BOOKMARK"
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert any(line["type"] == "BOOKMARK" and "annotations" not in line["object"]["metadata"] for line in lines[2:])


# --- list options ------------------------------------------------------------------------

def test_pagination_with_limit_and_continue(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "paging")
    for i in range(7):
        core.create_namespaced_config_map("paging", {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}})
    names, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map("paging", limit=3, _continue=token)
        pages += 1
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if pages == 1:  # every namespace also has kube-root-ca.crt, as on a real cluster
            assert page.metadata.remaining_item_count == 5
        if not token:
            break
    assert pages == 3 and names == [f"cm-{i}" for i in range(7)] + ["kube-root-ca.crt"]
    status, body = sim.http("GET", "/api/v1/namespaces/paging/configmaps?limit=2&continue=%%%")
    assert status == 400


def test_label_and_field_selectors(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "selectors")
    for name, labels in [("s1", {"app": "a", "env": "prod"}), ("s2", {"app": "b"}),
                         ("s3", {"app": "c", "env": "dev"})]:
        core.create_namespaced_pod("selectors", pod_manifest(name, labels=labels))

    def names(**kw: Any) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("selectors", **kw).items]

    assert names(label_selector="app in (a,b)") == ["s1", "s2"]
    assert names(label_selector="env notin (dev)") == ["s1", "s2"]
    assert names(label_selector="!env") == ["s2"]
    assert names(label_selector="env,app!=a") == ["s3"]
    assert names(field_selector="metadata.name=s2") == ["s2"]
    assert names(label_selector="app=b", field_selector="metadata.name=s2") == ["s2"]
    assert names(field_selector="status.phase=Pending,metadata.name!=s1") == ["s2", "s3"]
    with pytest.raises(ApiException) as err:
        names(label_selector="app in (")
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        names(field_selector="spec.bogus=1")
    assert err.value.status == 400 and "field label not supported" in err.value.body

    pod = sim.cluster.store.get(POD, "selectors", "s1")
    sim.call(lambda: sim.cluster.events.record(pod, "Scheduled", "assigned", component="default-scheduler"))
    events = core.list_namespaced_event("selectors", field_selector="involvedObject.kind=Pod,involvedObject.name=s1")
    assert [(e.reason, e.involved_object.name) for e in events.items] == [("Scheduled", "s1")]
    assert core.list_namespaced_event("selectors", field_selector="involvedObject.kind=Node").items == []

    status, removed = sim.http("DELETE", "/api/v1/namespaces/selectors/pods?labelSelector=env%3Ddev")
    assert status == 200 and [p["metadata"]["name"] for p in removed["items"]] == ["s3"]
    core.delete_collection_namespaced_pod("selectors", label_selector="env")
    assert names() == ["s2"]


def test_follow_logs_until_the_container_ends(sim: Sim) -> None:
    make_namespace(sim, "logs")
    sim.call(sim.cluster.create, POD, pod_manifest("lp", nodeName="node-1"), "logs")

    def state(running: bool) -> Callable[[dict[str, Any]], None]:
        def mutate(o: dict[str, Any]) -> None:
            st = {"running": {"startedAt": "2024-01-01T00:00:00Z"}} if running else \
                {"terminated": {"exitCode": 0, "reason": "Completed"}}
            o["status"]["containerStatuses"] = [{"name": "notebook", "ready": running, "restartCount": 0,
                                                 "image": "i", "imageID": "", "state": st}]
        return mutate

    status, body = sim.http("GET", "/api/v1/namespaces/logs/pods/lp/log")
    assert status == 400 and "is waiting to start: ContainerCreating" in body["message"]
    sim.call(sim.cluster.store.update, POD, "logs", "lp", state(True))
    log = sim.cluster.pod_log_path("logs", "lp", "notebook")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("first\n")
    proc = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(sim.kubeconfig), "-n", "logs", "logs", "-f", "lp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "first\n"
        with log.open("a") as f:
            f.write("second\n")
        assert proc.stdout.readline() == "second\n"
        sim.call(sim.cluster.store.update, POD, "logs", "lp", state(False))
        assert proc.wait(timeout=5) == 0  # the stream ended with the container
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- other kinds and admission -----------------------------------------------------------

def test_pvc_admission_and_service_gets_a_cluster_ip(core: k8s.CoreV1Api) -> None:
    # binding is the volume controller's (tests/sim/test_workloads.py); admission protects
    # the claim and leaves it Pending (this stand-in cluster has no default StorageClass)
    pvc = core.create_namespaced_persistent_volume_claim("jhub", {
        "metadata": {"name": "claim-alice"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}})
    assert pvc.status.phase == "Pending" and pvc.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    assert pvc.spec.volume_name is None and pvc.spec.storage_class_name is None
    assert pvc.spec.volume_mode == "Filesystem"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_persistent_volume_claim("jhub", {"metadata": {"name": "nosize"},
                                                                 "spec": {"accessModes": ["ReadWriteOnce"]}})
    assert err.value.status == 422 and "spec.resources[storage]: Required value" in err.value.body

    svc = core.create_namespaced_service("jhub", {"metadata": {"name": "hub"},
                                                  "spec": {"selector": {"app": "hub"}, "ports": [{"port": 8081}]}})
    assert svc.spec.type == "ClusterIP" and ipaddress.ip_address(svc.spec.cluster_ip) in ipaddress.ip_network(
        "127.0.0.0/8")  # tests reach every simulated address on loopback
    assert svc.spec.ports[0].target_port == 8081 and svc.spec.ports[0].protocol == "TCP"
    headless = core.create_namespaced_service("jhub", {"metadata": {"name": "headless"},
                                                       "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})
    assert headless.spec.cluster_ip == "None"

    with pytest.raises(ApiException) as err:
        core.create_namespaced_secret("jhub", {"metadata": {"name": "s"}, "data": {"k": "not base64!"}})
    assert err.value.status == 400
    secret = core.create_namespaced_secret("jhub", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert secret.data == {"k": "dg=="} and secret.type == "Opaque"


def test_priority_class_admission(sim: Sim, core: k8s.CoreV1Api) -> None:
    sched = k8s.SchedulingV1Api(core.api_client)
    sched.create_priority_class({"metadata": {"name": "user-pods"}, "value": 100})
    pod = core.create_namespaced_pod("jhub", pod_manifest("prio", priorityClassName="user-pods"))
    assert pod.spec.priority == 100 and pod.spec.preemption_policy == "PreemptLowerPriority"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("jhub", pod_manifest("noclass", priorityClassName="foo"))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == \
        'pods "noclass" is forbidden: no PriorityClass with name foo was found'
    sched.create_priority_class({"metadata": {"name": "default-prio"}, "value": 7, "globalDefault": True})
    try:
        pod = core.create_namespaced_pod("jhub", pod_manifest("defaulted"))
        assert pod.spec.priority == 7 and pod.spec.priority_class_name == "default-prio"
    finally:
        sched.delete_priority_class("default-prio")


def test_graceful_deletion_of_a_pod_on_a_node(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "grace")
    created = core.create_namespaced_pod("grace", pod_manifest("g", nodeName="node-1"))
    deleted = core.delete_namespaced_pod("g", "grace", grace_period_seconds=1)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 1
    assert core.read_namespaced_pod("g", "grace").metadata.deletion_timestamp is not None
    table = sim.kubectl("get", "pods", "-n", "grace").stdout
    assert "Terminating" in table
    events = []
    w = k8s_watch.Watch()
    for e in w.stream(core.list_namespaced_pod, "grace", resource_version=created.metadata.resource_version,
                      timeout_seconds=3):
        events.append((e["type"], e["object"].metadata.deletion_timestamp is not None))
        if e["type"] == "DELETED":
            w.stop()
    assert events == [("MODIFIED", True), ("DELETED", True)]
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("g", "grace")
    assert err.value.status == 404


def test_binding_and_status_subresource(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "binding")
    core.create_namespaced_pod("binding", pod_manifest("b1"))
    status, _ = sim.http("POST", "/api/v1/namespaces/binding/pods/b1/binding",
                         {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b1"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}})
    assert status == 201
    pod = core.read_namespaced_pod("b1", "binding")
    assert pod.spec.node_name == "node-1"
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]
    status, body = sim.http("POST", "/api/v1/namespaces/binding/pods/b1/binding",
                            {"target": {"kind": "Node", "name": "node-2"}})
    assert status == 409 and 'already assigned to node "node-1"' in body["message"]

    updated = core.patch_namespaced_pod_status("b1", "binding", {"status": {"phase": "Running", "podIP": "127.0.0.9"},
                                                                 "spec": {"restartPolicy": "Never"}})
    assert updated.status.phase == "Running" and updated.spec.restart_policy == "Always"  # spec untouched
    same = core.patch_namespaced_pod("b1", "binding", {"status": {"phase": "Failed"}})
    assert same.status.phase == "Running"  # the main resource ignores status
