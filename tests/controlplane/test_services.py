"""Services on the real control plane (issue 37), as kube-proxy and cluster DNS give them: the
node agent follows the real API server's Services and the real controller-manager's
EndpointSlices (sim.nodeagent.nodeservices) into the data plane's nftables rules and the pods'
hosts files. A pod reaches another through its Service's cluster IP and by its names, reaches
the API server through the `kubernetes` Service with its ServiceAccount token (in-cluster
configuration) and gets what RBAC gives it, resolves a Service made after it started; a
pod that is not ready gets no traffic; and a NetworkPolicy admits only the pods it names
(the network plugin reads the real API's NetworkPolicies, namespaces and pods)."""

from __future__ import annotations

import errno
import urllib.error
import urllib.request

import pytest
from kubernetes import client as k8s

from gpu_reclaim_sim.network import namespace as namespace_of_run

from ..support.controlplane import BUSYBOX, busybox_pod, phases
from ..support.sim_cluster import wait_for

pytestmark = pytest.mark.skipif(not namespace_of_run.inside(), reason="needs the run's network namespace (root)")

SCENARIO = {
    "name": "services", "namespaces": [], "mode": "process", "defaultImageSize": "10MB",
    "nodeGroups": [{"name": "svc", "count": 2, "cpu": "4", "memory": "8Gi", "images": [BUSYBOX]}],
}
# answers its own name; /ready answers 503 until someone asked for /make-ready
SERVER = """
import http.server, os
ready = False
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global ready
        ready = ready or self.path == "/make-ready"
        self.send_response(503 if self.path == "/ready" and not ready else 200)
        self.end_headers()
        self.wfile.write(os.environ["HOSTNAME"].encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""
# `fetch(url)`: the answer, once the Service's rules are there (refused until then: the data
# plane follows the API a moment later), or the error's name (a NetworkPolicy's refusal)
FETCH = """
import errno, time, urllib.error, urllib.request
def fetch(url):
    for _ in range(50):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except urllib.error.URLError as e:
            error = errno.errorcode.get(getattr(e.reason, "errno", None), str(e.reason))
            if error != "ECONNREFUSED":
                break
            time.sleep(0.1)
    return error
"""


def python_pod(name: str, code: str, *, node: str = "svc-2", labels: dict | None = None, **container) -> dict:
    body = busybox_pod(name, "", node=node, **container)
    body["spec"]["containers"][0]["command"] = ["python3", "-c", code]
    body["metadata"]["labels"] = labels or {}
    return body


def web_pod(name: str, *, ready_when_asked: bool = False) -> dict:
    """A server of `SERVER` labelled app=web, ready once it listens (or once asked)."""
    probe = {"httpGet": {"path": "/ready", "port": 8080}} if ready_when_asked else {"tcpSocket": {"port": 8080}}
    return python_pod(name, SERVER, node="svc-1", labels={"app": "web"},
                      readinessProbe={**probe, "periodSeconds": 1}, ports=[{"containerPort": 8080}])


def service(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}


def ready_endpoints(core: k8s.CoreV1Api, ns: str, name: str) -> list[str]:
    """The ready addresses of the Service's EndpointSlices, as the controller-manager wrote them."""
    slices = k8s.DiscoveryV1Api(core.api_client).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={name}").items
    return sorted(a for s in slices for e in s.endpoints or [] if e.conditions.ready for a in e.addresses)


def pod_ip(core: k8s.CoreV1Api, ns: str, name: str) -> str:
    return wait_for(lambda: core.read_namespaced_pod(name, ns).status.pod_ip, f"{name}'s address")


def output(agent, core: k8s.CoreV1Api, ns: str, name: str) -> list[str]:
    assert phases(core, ns, name, "Succeeded")[-1] == "Succeeded", agent.container_log(ns, name, "main")
    return agent.container_log(ns, name, "main").splitlines()


def test_a_pod_reaches_another_through_its_service_by_address_and_by_name(agent, core, ns):
    core.create_namespaced_pod(ns, web_pod("web-a"))
    ip = core.create_namespaced_service(ns, service("web")).spec.cluster_ip
    wait_for(lambda: ready_endpoints(core, ns, "web") == [pod_ip(core, ns, "web-a")], "web-a behind web")
    urls = [f"http://{ip}/", "http://web/", f"http://web.{ns}/", f"http://web.{ns}.svc.cluster.local/"]
    code = FETCH + f"for url in {urls!r}:\n    print(url, fetch(url))\nprint(open('/etc/hosts').read())"
    core.create_namespaced_pod(ns, python_pod("client", code))
    lines = output(agent, core, ns, "client")
    assert lines[:4] == [f"{url} web-a" for url in urls]
    # the hosts file as cluster DNS answers: the Service in its own namespace by its short name
    assert "\t".join([ip, "web", f"web.{ns}", f"web.{ns}.svc", f"web.{ns}.svc.cluster.local"]) in lines
    assert "10.96.0.1\tkubernetes.default\tkubernetes.default.svc\tkubernetes.default.svc.cluster.local" in lines


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service_with_its_token(agent, core, ns):
    rbac = k8s.RbacAuthorizationV1Api(core.api_client)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(ns, {"metadata": {"name": "pod-reader"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]})
    # in-cluster configuration as client libraries do it: the variables, the token and the CA
    code = """
import json, os, ssl, urllib.error, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount"
token, ns = open(d + "/token").read(), open(d + "/namespace").read()
context = ssl.create_default_context(cafile=d + "/ca.crt")
env = "https://" + os.environ["KUBERNETES_SERVICE_HOST"] + ":" + os.environ["KUBERNETES_SERVICE_PORT"]
for base in [env, "https://kubernetes.default.svc"]:
    for method, path in [("GET", "/api/v1/namespaces/" + ns + "/pods"), ("GET", "/api/v1/namespaces/" + ns + "/secrets"),
                         ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews")]:
        body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
        request = urllib.request.Request(base + path, method=method, data=body if method == "POST" else None,
                                         headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as r:
                answer = json.load(r)
                print(base, path, r.status, answer.get("items") and [p["metadata"]["name"] for p in answer["items"]]
                      or answer.get("status", {}).get("userInfo", {}).get("username"))
        except urllib.error.HTTPError as e:
            print(base, path, e.code, json.load(e)["reason"])
"""
    core.create_namespaced_pod(ns, python_pod("api-client", code))
    pods, secrets, review = f"/api/v1/namespaces/{ns}/pods", f"/api/v1/namespaces/{ns}/secrets", \
        "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    lines = output(agent, core, ns, "api-client")
    assert lines == [line for base in ["https://10.96.0.1:443", "https://kubernetes.default.svc"] for line in [
        f"{base} {pods} 200 ['api-client']", f"{base} {secrets} 403 Forbidden",
        f"{base} {review} 201 system:serviceaccount:{ns}:default"]]


def test_a_service_made_after_a_pod_started_resolves_in_it(agent, core, ns):
    core.create_namespaced_pod(ns, web_pod("web-a"))
    code = FETCH + """
import socket
for _ in range(600):
    try:
        address = socket.gethostbyname("late")
        break
    except OSError:
        time.sleep(0.1)
print(address, fetch("http://late/"))
"""
    core.create_namespaced_pod(ns, python_pod("waiter", code))
    wait_for(lambda: core.read_namespaced_pod("waiter", ns).status.phase == "Running", "the waiter running")
    ip = core.create_namespaced_service(ns, service("late")).spec.cluster_ip
    assert output(agent, core, ns, "waiter") == [f"{ip} web-a"]


def test_a_pod_that_is_not_ready_gets_no_traffic(agent, core, ns):
    core.create_namespaced_pod(ns, web_pod("web-a"))
    core.create_namespaced_pod(ns, web_pod("web-b", ready_when_asked=True))
    ip = core.create_namespaced_service(ns, service("web")).spec.cluster_ip
    a, b = pod_ip(core, ns, "web-a"), pod_ip(core, ns, "web-b")
    wait_for(lambda: ready_endpoints(core, ns, "web") == [a], "web-a ready behind web")
    wait_for(lambda: core.read_namespaced_pod("web-b", ns).status.container_statuses[0].started, "web-b started")

    def answers(n: int) -> set[str | None]:
        """Who answered `n` connections to the Service (None: refused, its rules not there yet)."""
        out = set()
        for _ in range(n):
            try:
                with urllib.request.urlopen(f"http://{ip}/", timeout=5) as r:
                    out.add(r.read().decode())
            except urllib.error.URLError as e:
                assert isinstance(e.reason, ConnectionRefusedError), e
                out.add(None)
        return out

    wait_for(lambda: answers(1) == {"web-a"}, "the Service's rules (the data plane follows the API a moment later)")
    assert answers(30) == {"web-a"}  # web-b answers on its own address, not through the Service
    with urllib.request.urlopen(f"http://{b}:8080/make-ready", timeout=5) as r:
        assert r.read() == b"web-b"
    wait_for(lambda: ready_endpoints(core, ns, "web") == sorted([a, b]), "web-b ready behind web too")
    assert wait_for(lambda: answers(20) == {"web-a", "web-b"}, "web-b reached through the Service")


def test_a_network_policy_admits_only_the_pods_it_names(agent, core, ns):
    k8s.NetworkingV1Api(core.api_client).create_namespaced_network_policy(ns, {
        "metadata": {"name": "web-from-clients"}, "spec": {
            "podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}], "ports": [{"port": 8080}]}]}})
    core.create_namespaced_pod(ns, web_pod("web-a"))  # its readiness probes come from its node: admitted
    ip = core.create_namespaced_service(ns, service("web")).spec.cluster_ip
    wait_for(lambda: ready_endpoints(core, ns, "web") == [pod_ip(core, ns, "web-a")], "web-a ready behind web")
    code = FETCH + "print(fetch('http://web/'))"
    core.create_namespaced_pod(ns, python_pod("client", code, labels={"role": "client"}))
    core.create_namespaced_pod(ns, python_pod("stranger", code))
    assert output(agent, core, ns, "client") == ["web-a"]
    assert output(agent, core, ns, "stranger") == ["EHOSTUNREACH"]  # ICMP admin-prohibited, at once
    with pytest.raises(urllib.error.URLError) as refused:  # nor from outside the cluster (this process)
        urllib.request.urlopen(f"http://{ip}/", timeout=5)
    assert getattr(refused.value.reason, "errno", None) == errno.EHOSTUNREACH


def test_a_load_balancer_service_gets_an_address_that_leads_to_its_pods(agent, core, ns):
    """As a cloud's service controller gives it (the agent's: the real control plane has none),
    and taken back when the Service stops being a LoadBalancer."""
    core.create_namespaced_pod(ns, web_pod("web-lb"))
    body = service("public")
    body["spec"]["type"] = "LoadBalancer"
    core.create_namespaced_service(ns, body)

    def ingress() -> list[str]:
        balancer = core.read_namespaced_service("public", ns).status.load_balancer
        return [i.ip for i in (balancer.ingress or [])] if balancer else []
    [ip] = wait_for(ingress, "the load balancer's address")
    assert ip.startswith("10.0.255.")
    reasons = wait_for(lambda: (found := {e.reason for e in core.list_namespaced_event(
        ns, field_selector="involvedObject.name=public").items}) >= {"EnsuringLoadBalancer", "EnsuredLoadBalancer"}
        and found, "the service controller's events")
    assert reasons >= {"EnsuringLoadBalancer", "EnsuredLoadBalancer"}
    wait_for(lambda: ready_endpoints(core, ns, "public") == [pod_ip(core, ns, "web-lb")], "web-lb behind public")

    def answer() -> str | None:  # from here, the machine: as a browser reaches a cloud's load balancer
        try:
            with urllib.request.urlopen(f"http://{ip}/", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None
    assert wait_for(answer, "an answer at the load balancer") == "web-lb"
    core.patch_namespaced_service("public", ns, {"spec": {"type": "ClusterIP"}})
    wait_for(lambda: not ingress(), "the address taken back")
