"""Workloads on the simulated cluster, driven by the real kubectl and the official client:
Deployments and their ReplicaSets, StatefulSets, DaemonSets, Services (cluster IPs that
answer, load balancers, Endpoints and EndpointSlices), the service variables and names
pods see, owner-reference garbage collection, PVCs bound to local directories, and the
objects the real z2jh chart renders.

One simulated cluster (its own process, process mode) serves the module; each test works
in a namespace of its own.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.kubelet.runtime import sandbox_available

from ..support.controlplane import namespace
from ..support.sim_cluster import kubectl, sim_running, wait_for
from ..support.workloads import PYTHON_IMAGE, http_status, in_the_run, server_deployment

STUB_IMAGES = [  # images whose command cannot run here (or need not): they "run" until stopped
    "registry.k8s.io/pause:3.10.2", "registry.example.edu/jupyterhub/k8s-hub-gpu-reclaim:0.1.0",
    "quay.io/jupyterhub/configurable-http-proxy:5.3.0", "registry.k8s.io/kube-scheduler:v1.35.7",
]
SCENARIO = {
    "name": "workloads",
    "namespaces": ["jhub"],
    "mode": "process",
    "bandwidth": "10GB/s",
    "nodeGroups": [
        {"name": "core", "count": 1},
        {"name": "user", "count": 2,
         "taints": [{"key": "hub.jupyter.org/dedicated", "value": "user", "effect": "NoSchedule"}]},
    ],
    "images": [{"name": name, "stub": True} for name in STUB_IMAGES],
}


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    with sim_running(tmp_path_factory.mktemp("workloads"), SCENARIO, control_plane) as child:
        yield child


@pytest.fixture(scope="module")
def api(cluster) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=cluster.info["kubeconfig"])


@pytest.fixture
def ns(api) -> Iterator[str]:
    """A namespace of the test's own."""
    with namespace(k8s.CoreV1Api(api), f"t-{uuid.uuid4().hex[:8]}") as name:
        yield name


# --- Deployments -------------------------------------------------------------------------

def test_deployment_applies_rolls_out_and_rolls_a_new_template(cluster, api, ns) -> None:
    manifest = yaml.safe_dump(server_deployment("web", replicas=2))
    out = kubectl(cluster, "-n", ns, "apply", "-f", "-", stdin=manifest).stdout
    assert "deployment.apps/web created" in out  # was: no matches for kind "Deployment"
    assert "successfully rolled out" in kubectl(cluster, "-n", ns, "rollout", "status", "deploy/web",
                                                "--timeout=60s").stdout
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    d = apps.read_namespaced_deployment("web", ns)
    assert (d.status.replicas, d.status.ready_replicas, d.status.available_replicas, d.status.updated_replicas) \
        == (2, 2, 2, 2)
    assert {c.type: (c.status, c.reason) for c in d.status.conditions} == {
        "Available": ("True", "MinimumReplicasAvailable"), "Progressing": ("True", "NewReplicaSetAvailable")}
    [rs] = apps.list_namespaced_replica_set(ns).items
    digest = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{digest}" and rs.spec.selector.match_labels == {"app": "web",
                                                                                    "pod-template-hash": digest}
    assert rs.metadata.owner_references[0].kind == "Deployment" and rs.metadata.owner_references[0].controller
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    pods = core.list_namespaced_pod(ns, label_selector="app=web").items
    assert len(pods) == 2 and all(p.metadata.name.startswith(f"web-{digest}-") for p in pods)
    assert all(p.metadata.owner_references[0].name == rs.metadata.name for p in pods)
    table = kubectl(cluster, "-n", ns, "get", "deploy,rs").stdout
    assert "READY   UP-TO-DATE   AVAILABLE" in table and "2/2" in table and "DESIRED   CURRENT   READY" in table

    # a new template: a second ReplicaSet takes the replicas over, the old one is kept at 0
    kubectl(cluster, "-n", ns, "set", "env", "deploy/web", "VERSION=two")
    kubectl(cluster, "-n", ns, "rollout", "status", "deploy/web", "--timeout=60s")
    sets = {r.metadata.name: r for r in apps.list_namespaced_replica_set(ns).items}
    assert len(sets) == 2
    new = next(r for r in sets.values() if r.metadata.name != rs.metadata.name)
    assert (sets[rs.metadata.name].spec.replicas, new.spec.replicas, new.status.ready_replicas) == (0, 2, 2)
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    pods = wait_for(lambda: [p for p in core.list_namespaced_pod(ns).items if p.metadata.deletion_timestamp is None
                             and p.metadata.labels["pod-template-hash"] == new.metadata.labels["pod-template-hash"]
                             ] if len(core.list_namespaced_pod(ns).items) == 2 else None, what="old pods gone")
    assert [e.value for p in pods for e in p.spec.containers[0].env] == ["two", "two"]
    reasons = [e.message for e in core.list_namespaced_event(ns).items if e.reason == "ScalingReplicaSet"]
    assert f"Scaled up replica set {new.metadata.name} from 0 to 1" in reasons
    assert any(m.startswith(f"Scaled down replica set {rs.metadata.name}") for m in reasons)

    # kubectl scale goes through the scale subresource
    kubectl(cluster, "-n", ns, "scale", "deploy/web", "--replicas=3")
    wait_for(lambda: (apps.read_namespaced_deployment("web", ns).status.available_replicas or 0) == 3,
             what="three available")


def test_recreate_starts_new_pods_only_after_the_old_ones_are_gone(cluster, api, ns) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    apps.create_namespaced_deployment(ns, server_deployment("hub", strategy="Recreate"))
    wait_for(lambda: (apps.read_namespaced_deployment("hub", ns).status.available_replicas or 0) == 1,
             what="hub available")
    listed = core.list_namespaced_pod(ns)
    [old] = listed.items
    apps.patch_namespaced_deployment("hub", ns, {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})
    # the pods' history from before the change: the old pod is gone before a new one exists
    order = []
    for event in k8s_watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=listed.metadata.
                                          resource_version, timeout_seconds=60):
        pod = event["object"]
        if event["type"] == "DELETED" and pod.metadata.name == old.metadata.name:
            order.append("old gone")
        elif event["type"] == "ADDED" and pod.metadata.name != old.metadata.name:
            order.append("new created")
            break
    assert order == ["old gone", "new created"]
    wait_for(lambda: apps.read_namespaced_deployment("hub", ns).status.updated_replicas == 1, what="hub updated")


def test_bad_workloads_are_refused_with_the_apiservers_words(cluster, api, ns) -> None:
    apps = k8s.AppsV1Api(api)
    bad = server_deployment("bad")
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_deployment(ns, bad)
    assert err.value.status == 422
    assert "spec.template.metadata.labels: Invalid value" in json.loads(err.value.body)["message"]
    assert "`selector` does not match template `labels`" in json.loads(err.value.body)["message"]
    no_image = server_deployment("noimage")
    del no_image["spec"]["template"]["spec"]["containers"][0]["image"]
    proc = kubectl(cluster, "-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump(no_image), check=False)
    assert proc.returncode != 0 and "spec.template.spec.containers[0].image: Required value" in proc.stderr
    apps.create_namespaced_deployment(ns, server_deployment("fixed"))
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment("fixed", ns, {"spec": {"selector": {"matchLabels": {"x": "y"}}}})
    assert err.value.status == 422 and "field is immutable" in err.value.body


# --- StatefulSets and DaemonSets -----------------------------------------------------------

def test_statefulset_makes_ordered_pods_and_their_claims(cluster, api, ns) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
                {"name": "db", "image": "registry.k8s.io/pause:3.10.2"}], "terminationGracePeriodSeconds": 0}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }
    kubectl(cluster, "-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump(sts))
    kubectl(cluster, "-n", ns, "rollout", "status", "sts/db", "--timeout=60s")
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
    assert set(pods) == {"db-0", "db-1"}
    # OrderedReady: db-1 was created only once db-0 was Running and Ready
    ready0 = next(c.last_transition_time for c in pods["db-0"].status.conditions if c.type == "Ready")
    assert pods["db-1"].metadata.creation_timestamp >= ready0
    assert pods["db-1"].spec.hostname == "db-1" and pods["db-1"].spec.subdomain == "db"
    assert pods["db-1"].metadata.labels["statefulset.kubernetes.io/pod-name"] == "db-1"
    assert pods["db-1"].metadata.labels["apps.kubernetes.io/pod-index"] == "1"
    assert pods["db-1"].spec.volumes[0].persistent_volume_claim.claim_name == "data-db-1"
    claims = {c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim(ns).items}
    assert set(claims) == {"data-db-0", "data-db-1"}
    assert all(c.status.phase == "Bound" for c in claims.values())
    assert claims["data-db-0"].metadata.labels == {"app": "db"}
    s = apps.read_namespaced_stateful_set("db", ns).status
    assert (s.replicas, s.ready_replicas, s.current_revision == s.update_revision) == (2, 2, True)
    assert "1/1" not in kubectl(cluster, "-n", ns, "get", "sts").stdout and \
        "2/2" in kubectl(cluster, "-n", ns, "get", "sts").stdout
    # scaling down removes the highest ordinal; its claim stays (Retain)
    kubectl(cluster, "-n", ns, "scale", "sts/db", "--replicas=1")
    wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["db-0"], what="db-1 gone")
    assert len(core.list_namespaced_persistent_volume_claim(ns).items) == 2


def test_daemonset_runs_one_pod_per_node_that_tolerates_it(cluster, api, ns) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)

    def daemonset(name: str, tolerations: list) -> dict:
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"tolerations": tolerations, "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.2"}]}}}}

    apps.create_namespaced_daemon_set(ns, daemonset("everywhere", [
        {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"}]))
    apps.create_namespaced_daemon_set(ns, daemonset("core-only", []))
    kubectl(cluster, "-n", ns, "rollout", "status", "ds/everywhere", "--timeout=60s")
    kubectl(cluster, "-n", ns, "rollout", "status", "ds/core-only", "--timeout=60s")
    nodes = {n.metadata.name for n in k8s.CoreV1Api(api).list_node().items}
    placed = {}
    for p in core.list_namespaced_pod(ns).items:
        placed.setdefault(p.metadata.labels["app"], []).append(p.spec.node_name)
    assert sorted(placed["everywhere"]) == sorted(nodes)
    assert placed["core-only"] == ["core-1"]  # the user nodes' taint is not tolerated
    s = apps.read_namespaced_daemon_set("everywhere", ns).status
    assert (s.desired_number_scheduled, s.number_ready, s.number_available) == (3, 3, 3)


# --- Services ----------------------------------------------------------------------------

def test_services_get_endpoints_from_ready_pods_and_answer_on_their_cluster_ip(cluster, api, ns) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    discovery = k8s.DiscoveryV1Api(api)
    apps.create_namespaced_deployment(ns, server_deployment("web", replicas=2))
    svc = core.create_namespaced_service(ns, {"metadata": {"name": "web", "labels": {"tier": "front"}}, "spec": {
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})
    lb = core.create_namespaced_service(ns, {"metadata": {"name": "public"}, "spec": {
        "type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80,
                                                                       "targetPort": 8080}]}})
    pods = wait_for(lambda: (lambda items: items if len(items) == 2 and all(p.status.pod_ip for p in items)
                             else None)(core.list_namespaced_pod(ns).items), what="two running pods")
    ips = sorted(p.status.pod_ip for p in pods)

    def endpoint_ips() -> list[str]:
        ep = core.read_namespaced_endpoints("web", ns)
        return sorted(a.ip for s in ep.subsets or [] for a in s.addresses or [])

    wait_for(lambda: endpoint_ips() == ips, what="both pods in the Endpoints")
    ep = core.read_namespaced_endpoints("web", ns)
    assert [(p.name, p.port, p.protocol) for p in ep.subsets[0].ports] == [("http", 8080, "TCP")]  # named port
    assert ep.subsets[0].addresses[0].target_ref.kind == "Pod" and ep.metadata.labels["tier"] == "front"
    [eps] = discovery.list_namespaced_endpoint_slice(ns, label_selector="kubernetes.io/service-name=web").items
    assert eps.address_type == "IPv4" and eps.metadata.owner_references[0].name == "web"
    assert sorted(e.addresses[0] for e in eps.endpoints) == ips and all(e.conditions.ready for e in eps.endpoints)
    assert in_the_run(svc.spec.cluster_ip)

    # the cluster IP and the load balancer's address answer (kube-proxy's job, in userspace)
    assert wait_for(lambda: http_status(f"http://{svc.spec.cluster_ip}:80/"), what="cluster IP answering") == 200
    ingress = wait_for(lambda: core.read_namespaced_service("public", ns).status.load_balancer.ingress,
                       what="LB address")
    assert in_the_run(ingress[0].ip) and ingress[0].ip != lb.spec.cluster_ip
    assert wait_for(lambda: http_status(f"http://{ingress[0].ip}:80/"), what="load balancer answering") == 200
    assert ingress[0].ip in kubectl(cluster, "-n", ns, "get", "svc", "public").stdout  # EXTERNAL-IP

    # no ready pod: no endpoint, and the address refuses connections
    kubectl(cluster, "-n", ns, "scale", "deploy/web", "--replicas=0")
    wait_for(lambda: endpoint_ips() == [], what="empty Endpoints")
    wait_for(lambda: http_status(f"http://{svc.spec.cluster_ip}:80/") is None, what="connections refused")
    assert "<none>" in kubectl(cluster, "-n", ns, "get", "endpoints", "web").stdout


def test_pods_see_service_variables_and_resolve_service_names(cluster, api, ns) -> None:
    if not sandbox_available():
        pytest.skip("pods get their own /etc/hosts only where mount namespaces can be made (root and unshare)")
    core = k8s.CoreV1Api(api)
    for name, ports in (("hub", [{"name": "hub", "port": 8081}, {"name": "gpu-reclaim", "port": 10101}]),
                        ("proxy-api", [{"port": 8001}])):
        core.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": {
            "selector": {"app": name}, "ports": ports}})
    hub_ip = core.read_namespaced_service("hub", ns).spec.cluster_ip
    script = (  # reports its service variables and what the names resolve to, then waits for `late`
        "import json, os, socket, time\n"
        "ns = os.environ['NS']\n"
        "names = ['hub', 'hub.NS', 'hub.NS.svc', 'hub.NS.svc.cluster.local', 'proxy-api']\n"
        "print(json.dumps({'env': {k: v for k, v in os.environ.items() if '_SERVICE_' in k or '_PORT' in k},\n"
        "                  'ips': {n: socket.gethostbyname(n.replace('NS', ns)) for n in names},\n"
        "                  'self': socket.gethostbyname(os.environ['HOSTNAME'])}), flush=True)\n"
        "while True:\n"
        "    try:\n"
        "        print(json.dumps({'late': socket.gethostbyname('late')}), flush=True)\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
        "time.sleep(3600)\n"
    )

    def pod(name: str, links: bool) -> dict:
        return {"metadata": {"name": name}, "spec": {"enableServiceLinks": links, "containers": [{
            "name": "probe", "image": PYTHON_IMAGE, "command": ["python3", "-c", script],
            "env": [{"name": "NS", "value": ns},
                    {"name": "HUB_URL", "value": "http://$(HUB_SERVICE_HOST):$(HUB_SERVICE_PORT)"}]}]}}

    core.create_namespaced_pod(ns, pod("probe", True))
    core.create_namespaced_pod(ns, pod("nolinks", False))
    wait_for(lambda: core.read_namespaced_pod("probe", ns).status.phase == "Running", what="probe running")
    core.create_namespaced_service(ns, {"metadata": {"name": "late"}, "spec": {"ports": [{"port": 80}]}})

    def logged(name: str) -> list[dict]:
        out = kubectl(cluster, "-n", ns, "logs", name, check=False).stdout
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    first, late = wait_for(lambda: logged("probe") if len(logged("probe")) == 2 else None, what="the probe's report")
    env = first["env"]
    assert env["HUB_SERVICE_HOST"] == hub_ip and env["HUB_SERVICE_PORT"] == "8081"
    assert env["HUB_SERVICE_PORT_HUB"] == "8081" and env["HUB_SERVICE_PORT_GPU_RECLAIM"] == "10101"
    assert env["HUB_PORT"] == f"tcp://{hub_ip}:8081" and env["HUB_PORT_10101_TCP"] == f"tcp://{hub_ip}:10101"
    assert (env["HUB_PORT_8081_TCP_PROTO"], env["HUB_PORT_8081_TCP_PORT"], env["HUB_PORT_8081_TCP_ADDR"]) == (
        "tcp", "8081", hub_ip)
    assert env["PROXY_API_SERVICE_HOST"] == core.read_namespaced_service("proxy-api", ns).spec.cluster_ip
    assert "LATE_SERVICE_HOST" not in env  # created after the pod started
    assert set(first["ips"].values()) >= {hub_ip} and first["ips"]["hub.NS.svc.cluster.local"] == hub_ip
    assert late["late"] == core.read_namespaced_service("late", ns).spec.cluster_ip  # DNS follows new Services
    assert first["self"] == core.read_namespaced_pod("probe", ns).status.pod_ip  # the pod's own name
    pod_env = {e.name: e.value for e in core.read_namespaced_pod("probe", ns).spec.containers[0].env}
    assert pod_env["HUB_URL"] == "http://$(HUB_SERVICE_HOST):$(HUB_SERVICE_PORT)"
    [nolinks, _] = wait_for(lambda: logged("nolinks") if len(logged("nolinks")) == 2 else None,
                            what="nolinks' report")
    assert not any(k.startswith("HUB_") for k in nolinks["env"])
    assert nolinks["ips"]["hub"] == hub_ip  # names resolve without the variables


# --- garbage collection ------------------------------------------------------------------

def test_deleting_a_deployment_deletes_its_replica_sets_and_pods(cluster, api, ns) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    apps.create_namespaced_deployment(ns, server_deployment("web", replicas=2))
    wait_for(lambda: len(core.list_namespaced_pod(ns).items) == 2, what="two pods")
    kubectl(cluster, "-n", ns, "delete", "deploy", "web")  # background propagation, as kubectl sends
    wait_for(lambda: not apps.list_namespaced_replica_set(ns).items and not core.list_namespaced_pod(ns).items,
             what="replica sets and pods collected")

    # orphan: the ReplicaSet and pods stay, without the reference to the gone Deployment
    apps.create_namespaced_deployment(ns, server_deployment("kept"))
    wait_for(lambda: len(core.list_namespaced_pod(ns).items) == 1, what="one pod")
    kubectl(cluster, "-n", ns, "delete", "deploy", "kept", "--cascade=orphan")
    [rs] = wait_for(lambda: [r for r in apps.list_namespaced_replica_set(ns).items if not r.metadata.owner_references],
                    what="an orphaned replica set")
    time.sleep(0.5)
    assert len(core.list_namespaced_pod(ns).items) == 1 and not apps.list_namespaced_deployment(ns).items
    apps.delete_namespaced_replica_set(rs.metadata.name, ns)
    wait_for(lambda: not core.list_namespaced_pod(ns).items, what="the orphaned pods collected with their set")


def test_foreground_deletion_waits_for_blocking_dependents(cluster, api, ns) -> None:
    core = k8s.CoreV1Api(api)
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    core.create_namespaced_config_map(ns, {"metadata": {"name": "held", "ownerReferences": [ref],
                                                        "finalizers": ["example.com/hold"]}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "free", "ownerReferences": [
        {**ref, "blockOwnerDeletion": False}]}})
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")
    # the owner waits, marked, while a blocking dependent exists; the others go
    wait_for(lambda: core.read_namespaced_config_map("held", ns).metadata.deletion_timestamp, what="held marked")
    wait_for(lambda: "free" not in [c.metadata.name for c in core.list_namespaced_config_map(ns).items],
             what="free gone")
    waiting = core.read_namespaced_config_map("owner", ns)
    assert waiting.metadata.deletion_timestamp and waiting.metadata.finalizers == ["foregroundDeletion"]
    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: not {"owner", "held"} & {c.metadata.name for c in core.list_namespaced_config_map(ns).items},
             what="owner removed once its blocking dependent was")
    # a dependent created for an owner that no longer exists is collected
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dangling", "ownerReferences": [ref]}})
    wait_for(lambda: "dangling" not in [c.metadata.name for c in core.list_namespaced_config_map(ns).items],
             what="dangling collected")


# --- persistent volumes ------------------------------------------------------------------

def test_claims_are_provisioned_bound_and_released(cluster, api, ns) -> None:
    core, storage = k8s.CoreV1Api(api), k8s.StorageV1Api(api)
    [sc] = storage.list_storage_class().items
    assert sc.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    assert "standard (default)" in kubectl(cluster, "get", "storageclass").stdout
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "home"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}})
    assert sc.volume_binding_mode == "WaitForFirstConsumer"  # bound once its first pod is scheduled
    # a claim in use stays while its pod runs; then it and its volume (and directory) go
    core.create_namespaced_pod(ns, {"metadata": {"name": "user"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.2",
                        "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}]}})
    pvc = wait_for(lambda: (lambda c: c if c.status.phase == "Bound" else None)(
        core.read_namespaced_persistent_volume_claim("home", ns)), what="Bound")
    assert pvc.spec.storage_class_name == "standard" and pvc.status.capacity == {"storage": "10Gi"}
    assert pvc.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    pv = core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.metadata.name == f"pvc-{pvc.metadata.uid}" and pv.status.phase == "Bound"
    assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (ns, "home")
    directory = Path(pv.spec.host_path.path)
    assert directory.is_dir() and directory.is_relative_to(Path(cluster.info["data_dir"]))

    wait_for(lambda: core.read_namespaced_pod("user", ns).status.phase == "Running", what="user running")
    core.delete_namespaced_persistent_volume_claim("home", ns)
    time.sleep(0.5)
    assert core.read_namespaced_persistent_volume_claim("home", ns).metadata.deletion_timestamp
    assert "Terminating" in kubectl(cluster, "-n", ns, "get", "pvc", "home").stdout
    core.delete_namespaced_pod("user", ns)
    wait_for(lambda: not core.list_namespaced_persistent_volume_claim(ns).items, what="claim released")
    wait_for(lambda: pv.metadata.name not in [v.metadata.name for v in core.list_persistent_volume().items],
             what="volume removed")
    wait_for(lambda: not directory.exists(), what="the volume's directory removed (reclaimPolicy Delete)")

    # a claim of a class nobody provisions waits Pending
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "other"}, "spec": {
        "storageClassName": "nfs", "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    time.sleep(0.5)
    assert core.read_namespaced_persistent_volume_claim("other", ns).status.phase == "Pending"


# --- the z2jh chart ------------------------------------------------------------------------

TEST_VALUES = {"prePuller": {"hook": {"enabled": False}}}  # a Helm hook: helm runs it before installing


def test_the_z2jh_chart_workloads_are_accepted_and_converge(cluster, api) -> None:
    if reason := z2jh.missing():
        pytest.skip(reason)
    docs = z2jh.render(z2jh.BASE, extra=TEST_VALUES)
    # the chart's RBAC is the release tests' (tests/release, with the hub's own ServiceAccount)
    applied = [d for d in docs if not d["apiVersion"].startswith("rbac.authorization.k8s.io/")]
    kinds = {d["kind"] for d in applied}
    assert {"Deployment", "StatefulSet", "DaemonSet", "Service", "PersistentVolumeClaim", "Secret",
            "ConfigMap"} <= kinds
    # as JSON, as the release is applied (z2jh.apply): PyYAML writes a checksum annotation
    # such as "34e8" unquoted, and kubectl reads that as a number
    out = kubectl(cluster, "-n", "jhub", "apply", "-f", "-", stdin="\n---\n".join(map(json.dumps, applied))).stdout
    # every object made; a priority class the worker's control plane has from an earlier module is kept
    lines = out.splitlines()
    assert len(lines) == len(applied), out
    assert all(line.endswith(" created") or line.startswith("priorityclass") and line.endswith(" unchanged")
               for line in lines), out
    for workload in ("deploy/hub", "deploy/proxy", "deploy/user-scheduler", "ds/continuous-image-puller",
                     "sts/user-placeholder"):
        kubectl(cluster, "-n", "jhub", "rollout", "status", workload, "--timeout=90s")
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    assert core.read_namespaced_persistent_volume_claim("hub-db-dir", "jhub").status.phase == "Bound"
    hub_pod = core.list_namespaced_pod("jhub", label_selector="component=hub").items[0]
    proxy_pod = core.list_namespaced_pod("jhub", label_selector="component=proxy").items[0]

    def ready(name: str) -> dict[int, list[str]]:
        ep = core.read_namespaced_endpoints(name, "jhub")
        return {p.port: sorted(a.ip for a in s.addresses or []) for s in ep.subsets or [] for p in s.ports}

    # named targetPorts resolved from the pods' container ports
    assert wait_for(lambda: ready("hub"), what="hub endpoints") == {8081: [hub_pod.status.pod_ip], 10101: [hub_pod.status.pod_ip]}
    assert wait_for(lambda: ready("proxy-api"), what="proxy-api endpoints") == {8001: [proxy_pod.status.pod_ip]}
    assert wait_for(lambda: ready("proxy-public"), what="proxy-public endpoints") == {8000: [proxy_pod.status.pod_ip]}
    public = wait_for(lambda: core.read_namespaced_service("proxy-public", "jhub").status.load_balancer.ingress,
                      what="LB address")
    assert in_the_run(public[0].ip)
    nodes = k8s.CoreV1Api(api).list_node().items
    puller = apps.read_namespaced_daemon_set("continuous-image-puller", "jhub").status
    assert puller.number_ready == len(nodes)  # it tolerates the user nodes' taint
    for node in nodes:  # and pulled the user image onto every node
        names = {n for image in node.status.images or [] for n in image.names}
        assert "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2" in names
    assert apps.read_namespaced_stateful_set("user-placeholder", "jhub").status.replicas == 0
    secret = core.read_namespaced_secret("hub", "jhub")
    assert "hub.config.ConfigurableHTTPProxy.auth_token" in secret.data
    values = yaml.safe_load(base64.b64decode(secret.data["values.yaml"]))
    assert values["hub"]["services"]["gpu-reclaim"]["url"] == "http://hub:10101"
