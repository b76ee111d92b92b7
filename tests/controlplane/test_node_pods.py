"""The node agent runs the pods the real kube-scheduler binds to its nodes (issue 37): through
the real API only, as each node itself (`system:node:<name>`). A pod's command runs as a local
process and the pod goes Running then Succeeded with the status and Events a kubelet writes;
its environment and arguments are expanded as Kubernetes expands them, from real Secrets,
ConfigMaps and Services, with the ServiceAccount token the node requested for it; deleting it
stops its processes (SIGTERM, then SIGKILL after the grace period) before the node deletes the
object; a crashing container is restarted with the kubelet's back-off; the node's watch resumes
from the last resourceVersion it saw; and one node cannot write another node's pod status."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import urllib.request
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as ak8s

from gpu_reclaim_sim.network import namespace as namespace_of_run
from gpu_reclaim_sim.nodeagent import podwatch

from ..support.controlplane import BUSYBOX, busybox_pod, phases
from ..support.sim_cluster import wait_for

IMAGE = BUSYBOX
TOOL = "registry.example/tools/greet:1.0"
pod = functools.partial(busybox_pod, node="runner-1")
SCENARIO = {
    "name": "node-pods", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "nodeGroups": [{"name": "runner", "count": 2, "cpu": "4", "memory": "8Gi", "images": [IMAGE, TOOL]}],
    # an image whose program is one of this machine's, as z2jh's user-scheduler image holds kube-scheduler
    "images": [{"name": TOOL, "programs": {"/usr/local/bin/greet": ["/bin/echo", "greetings from the image:"]}}],
}
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def events(core: k8s.CoreV1Api, ns: str, name: str) -> list[k8s.CoreV1Event]:
    return sorted(core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items,
                  key=lambda e: (e.first_timestamp or e.event_time, e.metadata.creation_timestamp))


def test_a_pod_runs_its_command_and_reports_as_a_kubelet_does(agent, core, ns):
    core.create_namespaced_pod(ns, pod("hello", "echo hello from $HOSTNAME; sleep 2", imagePullPolicy="Always"))
    assert phases(core, ns, "hello", "Succeeded") == ["Pending", "Running", "Succeeded"]
    p = core.read_namespaced_pod("hello", ns)
    node = core.read_node("runner-1")
    internal = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    assert p.spec.node_name == "runner-1"
    assert p.status.host_ip == internal and [i.ip for i in p.status.host_ips] == [internal]
    assert ipaddress.ip_address(p.status.pod_ip) in (namespace_of_run.PODS if namespace_of_run.inside() else LOOPBACK)
    assert [i.ip for i in p.status.pod_ips] == [p.status.pod_ip]
    assert p.status.start_time is not None
    conditions = {c.type: c.status for c in p.status.conditions}
    assert conditions == {"PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "False",
                          "ContainersReady": "False", "PodScheduled": "True"}
    [status] = p.status.container_statuses
    assert status.name == "main" and status.image == IMAGE and status.restart_count == 0
    assert status.container_id.startswith("containerd://") and status.image_id.startswith("docker.io/library/busybox@sha256:")
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert terminated.started_at <= terminated.finished_at
    assert agent.container_log(ns, "hello", "main") == "hello from hello\n"
    # the kubelet's Events, written by the node itself
    by_reason = {e.reason: e for e in events(core, ns, "hello") if e.source.component == "kubelet"}
    assert list(by_reason) == ["Pulling", "Pulled", "Created", "Started"]
    assert by_reason["Pulling"].message == f'Pulling image "{IMAGE}"'
    assert re.fullmatch(rf'Successfully pulled image "{re.escape(IMAGE)}" in \S+ \(\S+ including waiting\)\. '
                        r'Image size: 10000000 bytes\.', by_reason["Pulled"].message)
    assert by_reason["Created"].message == "Created container main"
    assert by_reason["Started"].message == "Started container main"
    for e in by_reason.values():
        assert e.type == "Normal" and e.source.host == "runner-1" and e.reporting_component == "kubelet"
        assert e.involved_object.uid == p.metadata.uid and e.involved_object.field_path == "spec.containers{main}"


def test_env_and_args_are_expanded_as_kubernetes_expands_them(agent, core, ns):
    core.create_namespaced_secret(ns, {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}})
    svc = core.create_namespaced_service(ns, {"metadata": {"name": "my-db"}, "spec": {
        "selector": {"app": "db"}, "ports": [{"name": "sql", "port": 5432}]}})
    script = ('echo "args=$0|$1|$2"; for v in A B C NAME IP NODE SA PASSWORD MODE KUBERNETES_SERVICE_HOST '
              'KUBERNETES_SERVICE_PORT MY_DB_SERVICE_HOST MY_DB_SERVICE_PORT_SQL MY_DB_PORT; do echo "$v=$(printenv $v)"; done; '
              'cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; '
              'test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token')
    env = [{"name": "A", "value": "one"}, {"name": "B", "value": "$(A)-two"}, {"name": "C", "value": "$$(A) $(NOPE)"},
           {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
           {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
           {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}}]
    core.create_namespaced_pod(ns, pod("env", script, args=["$(A)", "$(B)", "$$(A)"], env=env))
    phases(core, ns, "env", "Succeeded")
    p = core.read_namespaced_pod("env", ns)
    assert agent.container_log(ns, "env", "main").splitlines() == [
        "args=one|one-two|$(A)", "A=one", "B=one-two", "C=$(A) $(NOPE)", "NAME=env", f"IP={p.status.pod_ip}",
        "NODE=runner-1", "SA=default", "PASSWORD=s3cret", "MODE=fast",
        "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443",
        f"MY_DB_SERVICE_HOST={svc.spec.cluster_ip}", "MY_DB_SERVICE_PORT_SQL=5432",
        f"MY_DB_PORT=tcp://{svc.spec.cluster_ip}:5432", ns, "token"]


def test_an_images_program_runs_at_its_path_in_the_image_as_the_pods_user(agent, core, ns):
    body = pod("greet", "", image=TOOL, securityContext={"runAsUser": 65534, "runAsGroup": 65534})
    body["spec"]["containers"][0]["command"] = ["/usr/local/bin/greet", "world"]
    core.create_namespaced_pod(ns, body)
    assert phases(core, ns, "greet", "Succeeded")[-1] == "Succeeded", agent.container_log(ns, "greet", "main")
    assert agent.container_log(ns, "greet", "main") == "greetings from the image: world\n"


def test_a_missing_secret_is_the_kubelets_create_container_config_error(agent, core, ns):
    env = [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]
    core.create_namespaced_pod(ns, pod("nosecret", "echo never", env=env))
    def waiting_past_creation():  # the kubelet reports ContainerCreating first
        statuses = core.read_namespaced_pod("nosecret", ns).status.container_statuses
        state = statuses[0].state.waiting if statuses else None
        return state if state and state.reason != "ContainerCreating" else None

    waiting = wait_for(waiting_past_creation, "the container waiting on its config")
    assert waiting.reason == "CreateContainerConfigError"
    assert agent.container_log(ns, "nosecret", "main") == ""
    # tried again, as the kubelet's pod syncs do: it starts once the secret is there
    core.create_namespaced_secret(ns, {"metadata": {"name": "absent"}, "stringData": {"k": "v"}})
    assert phases(core, ns, "nosecret", "Succeeded")[-1] == "Succeeded"
    assert agent.container_log(ns, "nosecret", "main") == "never\n"


def test_a_secret_volume_waits_for_its_secret_then_holds_it(agent, core, ns):
    spec = pod("mounted", "cat /etc/creds/password", volumeMounts=[{"name": "creds", "mountPath": "/etc/creds"}])
    spec["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "later"}}]
    core.create_namespaced_pod(ns, spec)
    failed = wait_for(lambda: [e for e in events(core, ns, "mounted") if e.reason == "FailedMount"], "a FailedMount")
    assert failed[0].type == "Warning"
    assert failed[0].message == 'MountVolume.SetUp failed for volume "creds" : secret "later" not found'
    core.create_namespaced_secret(ns, {"metadata": {"name": "later"}, "stringData": {"password": "now"}})
    phases(core, ns, "mounted", "Succeeded")
    assert agent.container_log(ns, "mounted", "main") == "now"


def test_deleting_a_running_pod_stops_its_processes_then_the_node_deletes_it(agent, core, ns):
    marker = f"stubborn-{ns}"
    spec = pod("stop", "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done", grace=3)
    spec["spec"]["containers"].append({"name": "stubborn", "image": IMAGE, "command": [
        "sh", "-c", f"trap '' TERM; exec sh -c 'while :; do sleep 0.1; done' {marker}"]})
    core.create_namespaced_pod(ns, spec)
    phases(core, ns, "stop", "Running")
    wait_for(lambda: "ready" in agent.container_log(ns, "stop", "main"), "the container's trap set")
    assert _processes_with(marker)
    deleted = time.monotonic()
    core.delete_namespaced_pod("stop", ns)  # its own grace period, 3 s
    gone = wait_for(lambda: not core.list_namespaced_pod(ns, field_selector="metadata.name=stop").items
                    and time.monotonic(), "the pod object deleted", timeout=30)
    assert agent.container_log(ns, "stop", "main") == "ready\ngot TERM\n"
    assert _processes_with(marker) == []  # the one that ignored SIGTERM was killed
    assert gone - deleted >= 3  # SIGKILL only after the grace period
    killing = [e for e in events(core, ns, "stop") if e.reason == "Killing"]
    assert sorted(e.message for e in killing) == ["Stopping container main", "Stopping container stubborn"]


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_crashing_container_is_restarted_with_back_off(agent, core, ns):
    core.create_namespaced_pod(ns, pod("crash", "echo run; exit 3", restart="Always"))

    def backing_off() -> Any:
        s = core.read_namespaced_pod("crash", ns).status.container_statuses
        return s and s[0].restart_count >= 2 and s[0].state.waiting and s[0]

    status = wait_for(backing_off, "the second restart's back-off", timeout=60)
    uid = core.read_namespaced_pod("crash", ns).metadata.uid
    assert status.state.waiting.reason == "CrashLoopBackOff"
    assert re.fullmatch(rf"back-off (10|20)s restarting failed container=main pod=crash_{ns}\({uid}\)",
                        status.state.waiting.message)
    last = status.last_state.terminated
    assert (last.exit_code, last.reason) == (3, "Error")
    # written on its own, beside the status
    backoff = wait_for(lambda: [e for e in events(core, ns, "crash") if e.reason == "BackOff"], "the BackOff event")
    assert backoff[0].type == "Warning"
    assert backoff[0].message == f"Back-off restarting failed container main in pod crash_{ns}({uid})"
    assert agent.container_log(ns, "crash", "main", previous=True) == "run\n"
    # the same event again is counted on the first one, as client-go's correlator does
    wait_for(lambda: any(e.reason == "Started" and e.count >= 3 for e in events(core, ns, "crash")),
             "the third start counted on the Started event")
    assert [e.reason for e in events(core, ns, "crash")].count("Started") == 1


def test_a_node_cannot_write_another_nodes_pod_status(agent, core, ns, control_plane, tmp_path):
    from kubernetes import config as k8s_config

    core.create_namespaced_pod(ns, pod("elsewhere", "sleep 30", node="runner-1"))
    phases(core, ns, "elsewhere", "Running")
    issued = control_plane.authority.issue("node-runner-2-test", "system:node:runner-2", ("system:nodes",))
    config = control_plane.authority.kubeconfig(tmp_path / "node.kubeconfig", control_plane.server,
                                                "system:node:runner-2", client=issued)
    as_other = k8s.CoreV1Api(k8s_config.new_client_from_config(str(config)))
    with pytest.raises(ApiException) as refused:  # NodeRestriction
        as_other.patch_namespaced_pod_status("elsewhere", ns, {"status": {"phase": "Failed"}})
    assert refused.value.status == 403
    assert ('pods \\"elsewhere\\" is forbidden: node \\"runner-2\\" can only update pod status for pods with '
            "spec.nodeName set to itself") in refused.value.body
    assert core.read_namespaced_pod("elsewhere", ns).status.phase == "Running"
    with pytest.raises(ApiException) as refused:  # nor delete it (NodeRestriction)
        as_other.delete_namespaced_pod("elsewhere", ns)
    assert refused.value.status == 403 and "can only delete pods with spec.nodeName set to itself" in refused.value.body
    with pytest.raises(ApiException) as refused:  # nor read it (the Node authorizer)
        as_other.read_namespaced_pod("elsewhere", ns)
    assert refused.value.status == 403
    assert "node: no relationship found between node 'runner-2' and this object" in refused.value.body


async def test_the_nodes_pod_watch_resumes_from_its_resource_version(agent, core, ns, control_plane,
                                                                     monkeypatch):
    """The server ends each watch after a second here: the watch goes on from the last version
    it saw (no new list, no pod seen twice); its first list reports a pod it knew of that went
    meanwhile as DELETED."""
    monkeypatch.setattr(podwatch, "WATCH_TIMEOUT_S", (1, 1))
    issued = control_plane.authority.issue("node-runner-2-watch", "system:node:runner-2", ("system:nodes",))
    config = ak8s.Configuration(host=control_plane.server)
    config.ssl_ca_cert, config.cert_file, config.key_file = (str(control_plane.authority.cert), str(issued.cert),
                                                             str(issued.key))
    seen: list[tuple[str, str]] = []
    async with ak8s.ApiClient(config) as api:
        watch = podwatch.PodWatch(api, "runner-2", lambda type_, p: seen.append((type_, p["metadata"]["name"])))
        watch.known["uid-of-a-gone-pod"] = {"metadata": {"uid": "uid-of-a-gone-pod", "name": "gone", "namespace": ns}}
        task = asyncio.create_task(watch.run())
        try:
            for i in range(3):  # one in each of three watches
                await asyncio.to_thread(core.create_namespaced_pod, ns, pod(f"watched-{i}", "sleep 30", node="runner-2"))
                await asyncio.sleep(1.5)
            for _ in range(50):
                if ("ADDED", "watched-2") in seen:
                    break
                await asyncio.sleep(0.1)
        finally:
            task.cancel()
    assert seen[0] == ("DELETED", "gone")
    assert [name for type_, name in seen if type_ == "ADDED"] == ["watched-0", "watched-1", "watched-2"]
    assert watch.lists == 1


@pytest.mark.skipif(not namespace_of_run.available(), reason="the run's network namespace needs root and ip")
def test_a_service_gets_its_pods_address_from_the_real_controller_manager(agent, core, ns):
    """In the run's network namespace a pod's address is one the real API server takes in an
    EndpointSlice: the controller-manager writes the ready pod behind a Service, and the pod
    answers there."""
    ready = {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}, "ports": [{"containerPort": 8080}]}
    body = pod("web", "echo ok > index.html; exec python3 -m http.server 8080 --bind 0.0.0.0", **ready)
    body["metadata"]["labels"] = {"app": "web"}
    core.create_namespaced_pod(ns, body)
    core.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    discovery = k8s.DiscoveryV1Api(core.api_client)

    def endpoints() -> list:
        slices = discovery.list_namespaced_endpoint_slice(ns, label_selector="kubernetes.io/service-name=web").items
        return [e for s in slices for e in s.endpoints or [] if e.conditions.ready]

    [endpoint] = wait_for(endpoints, "the pod's ready endpoint in the Service's EndpointSlice")
    ip = core.read_namespaced_pod("web", ns).status.pod_ip
    assert endpoint.addresses == [ip] and ipaddress.ip_address(ip) in namespace_of_run.PODS
    with urllib.request.urlopen(f"http://{ip}:8080/index.html", timeout=5) as r:
        assert r.read() == b"ok\n"
