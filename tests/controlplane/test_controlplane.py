"""The real Kubernetes control plane that `make setup` builds from controlplane/'s Go module
(issue 37), as sim.controlplane starts it for a test worker: the API server says the version
go.mod pins, the controller-manager's controllers run, and the API server authenticates and
authorizes what it should (RBAC, and certificates only from the run's CA)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.controlplane.components import ControlPlane
from gpu_reclaim_sim.controlplane.credentials import Authority
from gpu_reclaim_sim.network import namespace

from ..support.sim_cluster import wait_for

ROOT = Path(__file__).resolve().parents[2]
GO_MOD = (ROOT / "controlplane" / "go.mod").read_text()


def _status(plane: ControlPlane, path: str, context: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(plane.server + path, timeout=10, context=context) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_control_plane_is_the_version_go_mod_pins_and_its_controllers_run(control_plane):
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", GO_MOD, re.M)
    assert pinned is not None and control_plane.version() == pinned[1] == "v1.37.2"
    assert [c.name for c in control_plane.components] == ["etcd", "kube-apiserver", "kube-scheduler",
                                                         "kube-controller-manager"]
    # the serviceaccount controller gives each namespace its `default` account, the root-CA
    # publisher the CA that pods trust
    wait_for(lambda: control_plane.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
             "the default ServiceAccount")
    config_map = wait_for(lambda: (got := control_plane.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"))
                          [0] == 200 and got[1], "kube-root-ca.crt")
    assert config_map["data"]["ca.crt"] == control_plane.authority.cert.read_text()


def test_the_api_server_authorizes_by_rbac_and_trusts_only_the_runs_ca(control_plane, tmp_path):
    anonymous = ssl.create_default_context(cafile=str(control_plane.authority.cert))
    # anonymous: system:public-info-viewer lets anyone read /version, and RBAC nothing more
    assert _status(control_plane, "/version", anonymous) == 200
    assert _status(control_plane, "/api/v1/pods", anonymous) == 403
    scheduler = k8s.CoreV1Api(k8s_config.new_client_from_config(
        str(control_plane.work / "kube-scheduler.kubeconfig")))
    assert scheduler.list_pod_for_all_namespaces(limit=1).items is not None  # its role reads pods
    with pytest.raises(ApiException) as refused:
        scheduler.list_secret_for_all_namespaces()
    assert refused.value.status == 403
    # a certificate from another CA, however named, is refused outright (401, not even anonymous)
    other = Authority.create(tmp_path / "other")
    forged = other.issue("admin", "admin", ("system:masters",))
    context = ssl.create_default_context(cafile=str(control_plane.authority.cert))
    context.load_cert_chain(forged.cert, forged.key)
    assert _status(control_plane, "/api/v1/pods", context) == 401


@pytest.mark.skipif(not namespace.available(), reason="a network namespace of the run's own needs root and ip")
def test_the_api_server_advertises_a_real_address_in_the_runs_network(control_plane):
    """Inside the run's network namespace the `kubernetes` Service has the API server's real
    endpoint, written by its reconciler, reached there as pods reach it; the API server refuses
    loopback endpoints, the reason the run has a namespace of its own; and nothing outside the
    namespace can be reached."""
    assert namespace.inside()
    discovery = k8s.DiscoveryV1Api(k8s_config.new_client_from_config(str(control_plane.admin_kubeconfig)))
    port = int(control_plane.server.rsplit(":", 1)[1])
    [kubernetes] = wait_for(lambda: discovery.list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes").items, "the kubernetes EndpointSlice")
    assert [e.addresses for e in kubernetes.endpoints] == [[namespace.API_SERVER_ADDRESS]]
    assert [(p.name, p.port) for p in kubernetes.ports] == [("https", port)]
    context = ssl.create_default_context(cafile=str(control_plane.authority.cert))
    with urllib.request.urlopen(f"https://{namespace.API_SERVER_ADDRESS}:{port}/version", context=context) as r:
        assert r.status == 200  # the serving certificate names the advertise address
    loopback = {"metadata": {"name": "on-loopback", "labels": {"kubernetes.io/service-name": "x"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.5"]}], "ports": [{"port": 80}]}
    with pytest.raises(ApiException) as refused:
        discovery.create_namespaced_endpoint_slice("default", loopback)
    assert refused.value.status == 422 and "loopback" in refused.value.body
    loopback["endpoints"] = [{"addresses": [str(namespace.PODS.network_address + 7)]}]
    discovery.create_namespaced_endpoint_slice("default", loopback)  # a pod's address is accepted
    discovery.delete_namespaced_endpoint_slice("on-loopback", "default")
    with pytest.raises(OSError):  # no route out of the namespace
        socket.create_connection(("192.0.2.1", 443), timeout=2)


STARTED_THEN_KILLED = """
import json, sys
from pathlib import Path
from gpu_reclaim_sim.controlplane.components import ControlPlane
plane = ControlPlane(Path(sys.argv[1])).start()
print(json.dumps([c.process.pid for c in plane.components]), flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_a_killed_starter_leaves_no_component_running(tmp_path):
    """The process that started the control plane killed (SIGKILL: no chance to stop anything),
    every component ends with it: etcd, and a kube-apiserver that etcd's end would otherwise
    keep waiting in its graceful shutdown."""
    starter = subprocess.Popen([sys.executable, "-c", STARTED_THEN_KILLED, str(tmp_path / "run")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(starter.stdout.readline())
        assert len(pids) == 4 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    finally:
        starter.kill()
        starter.wait()

    def running() -> list[int]:
        return [pid for pid in pids if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text()]

    wait_for(lambda: not running(), "the components gone", timeout=10)
