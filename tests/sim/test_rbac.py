"""RBAC in the simulated API server, checked with real clients: kubectl (`auth can-i`,
`auth whoami`, `create token|role|rolebinding`, `--as`) and the official `kubernetes`
client authenticated with ServiceAccount tokens on the HTTPS port, against the rules and
the `403 Forbidden` wording of kube-apiserver's RBAC authorizer."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from gpu_reclaim_sim.rbac.authn import UserInfo
from gpu_reclaim_sim.rbac.authorizer import Rule, request_attributes
from gpu_reclaim_sim.resources import BY_KIND
from gpu_reclaim_sim.kubelet.runtime import sandbox_available

from ..support.apiserver_sim import Sim, apiserver_fixtures, make_namespace, pod_manifest
from ..support.rbac import CHART_HUB_RULES, HUB, Identity, apply, binding, refused, role, sa
from ..support.sim_cluster import kubectl as sim_kubectl, sim_running

POD = BY_KIND["Pod"]


# --- request attributes and rules (no server) ---------------------------------------------

def attrs(method: str, path: str, **query: str) -> tuple[Any, ...]:
    a = request_attributes(UserInfo("u"), method, path, query)
    return (a.verb, a.resource_request, a.namespace, a.api_group, a.resource, a.subresource, a.name)


def test_request_attributes_are_the_apiservers() -> None:
    assert attrs("GET", "/api/v1/namespaces/jhub/pods") == ("list", True, "jhub", "", "pods", "", "")
    assert attrs("GET", "/api/v1/namespaces/jhub/pods", watch="true") == ("watch", True, "jhub", "", "pods", "", "")
    assert attrs("GET", "/api/v1/watch/namespaces/jhub/pods") == ("watch", True, "jhub", "", "pods", "", "")
    assert attrs("GET", "/api/v1/namespaces/jhub/pods", fieldSelector="metadata.name=x") == (
        "list", True, "jhub", "", "pods", "", "x")
    assert attrs("GET", "/api/v1/namespaces/jhub/pods/x/log") == ("get", True, "jhub", "", "pods", "log", "x")
    assert attrs("PATCH", "/api/v1/namespaces/jhub/pods/x") == ("patch", True, "jhub", "", "pods", "", "x")
    assert attrs("PUT", "/api/v1/namespaces/jhub/pods/x/status") == ("update", True, "jhub", "", "pods", "status", "x")
    assert attrs("POST", "/api/v1/namespaces/jhub/pods/x/eviction") == (
        "create", True, "jhub", "", "pods", "eviction", "x")
    assert attrs("DELETE", "/api/v1/namespaces/jhub/pods") == ("deletecollection", True, "jhub", "", "pods", "", "")
    assert attrs("DELETE", "/api/v1/namespaces/jhub/pods/x") == ("delete", True, "jhub", "", "pods", "", "x")
    # a namespace is named by itself; its status is a namespace subresource
    assert attrs("GET", "/api/v1/namespaces/jhub") == ("get", True, "jhub", "", "namespaces", "", "jhub")
    assert attrs("PUT", "/api/v1/namespaces/jhub/status") == (
        "update", True, "jhub", "", "namespaces", "status", "jhub")
    assert attrs("GET", "/api/v1/nodes") == ("list", True, "", "", "nodes", "", "")
    assert attrs("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/jhub/roles") == (
        "create", True, "jhub", "rbac.authorization.k8s.io", "roles", "", "")
    for path in ("/api", "/api/v1", "/apis/rbac.authorization.k8s.io/v1", "/version", "/healthz"):
        assert attrs("GET", path)[:2] == ("get", False), path


def test_rules_match_as_the_rbac_authorizer() -> None:
    def allows(rule: dict, method: str, path: str, **query: str) -> bool:
        return Rule(rule).allows(request_attributes(UserInfo("u"), method, path, query))

    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    assert allows(pods, "GET", "/api/v1/namespaces/a/pods/x")
    assert not allows(pods, "GET", "/api/v1/namespaces/a/pods/x/log")  # a subresource is its own resource
    assert not allows(pods, "PATCH", "/api/v1/namespaces/a/pods/x")
    assert not allows(pods, "GET", "/apis/apps/v1/namespaces/a/pods")  # another API group
    assert allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, "DELETE", "/apis/apps/v1/deployments")
    assert allows({"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]},
                  "PUT", "/api/v1/namespaces/a/pods/x/status")
    assert allows({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, "GET", "/api/v1/namespaces/a/pods/x/log")
    named = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["only"], "verbs": ["get", "list"]}
    assert allows(named, "GET", "/api/v1/namespaces/a/configmaps/only")
    assert not allows(named, "GET", "/api/v1/namespaces/a/configmaps/other")
    assert not allows(named, "GET", "/api/v1/namespaces/a/configmaps")  # a list names nothing...
    assert allows(named, "GET", "/api/v1/namespaces/a/configmaps", fieldSelector="metadata.name=only")  # ...unless
    urls = {"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}
    assert allows(urls, "GET", "/apis/rbac.authorization.k8s.io/v1") and allows(urls, "GET", "/version")
    assert not allows(urls, "GET", "/api") and not allows(urls, "POST", "/version")
    assert not allows(urls, "GET", "/api/v1/namespaces/a/pods")  # URL rules never match resources


# --- against the API server ---------------------------------------------------------------

sim = apiserver_fixtures("rbac")[0]


def test_a_service_account_gets_what_its_role_grants_and_the_apiservers_403_otherwise(sim: Sim, tmp_path: Path) -> None:
    apply(sim, role("hub", "jhub", *CHART_HUB_RULES), binding("hub", "jhub", "Role", "hub", sa("hub", "jhub")))
    hub = Identity(sim, "jhub", "hub", tmp_path)
    core = hub.core()
    core.create_namespaced_pod("jhub", pod_manifest("jupyter-alice"))
    assert core.read_namespaced_pod("jupyter-alice", "jhub").metadata.name == "jupyter-alice"
    assert "jupyter-alice" in [p.metadata.name for p in core.list_namespaced_pod("jhub").items]

    body = refused(core.patch_namespaced_pod, "jupyter-alice", "jhub", {"metadata": {"annotations": {"a": "b"}}})
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
                    "code": 403, "details": {"name": "jupyter-alice", "kind": "pods"},
                    "message": f'pods "jupyter-alice" is forbidden: User "{HUB}" cannot patch resource "pods" in '
                               'API group "" in the namespace "jhub"'}
    assert refused(core.list_namespaced_pod, "default")["message"] == (
        f'pods is forbidden: User "{HUB}" cannot list resource "pods" in API group "" in the namespace "default"')
    assert refused(core.list_node)["message"] == (
        f'nodes is forbidden: User "{HUB}" cannot list resource "nodes" in API group "" at the cluster scope')
    assert refused(core.read_namespaced_pod_log, "jupyter-alice", "jhub")["message"] == (
        f'pods "jupyter-alice" is forbidden: User "{HUB}" cannot get resource "pods/log" in API group "" in the '
        'namespace "jhub"')
    status, body = sim.http("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/x", token=hub.token)
    assert (status, body["message"], body["details"]) == (403, (
        f'priorityclasses.scheduling.k8s.io "x" is forbidden: User "{HUB}" cannot get resource "priorityclasses" '
        'in API group "scheduling.k8s.io" at the cluster scope'), {"name": "x", "group": "scheduling.k8s.io",
                                                                    "kind": "priorityclasses"})

    # kubectl: its own words for the same refusal, and auth can-i / whoami
    out = hub.kubectl("annotate", "pod", "jupyter-alice", "x=y")
    assert out.returncode == 1 and out.stderr.strip() == (
        f'Error from server (Forbidden): pods "jupyter-alice" is forbidden: User "{HUB}" cannot patch resource '
        '"pods" in API group "" in the namespace "jhub"')
    assert hub.can_i("create", "pods") and hub.can_i("watch", "pods") and hub.can_i("delete", "secrets")
    assert not hub.can_i("patch", "pods") and not hub.can_i("list", "nodes") and not hub.can_i("get", "pods", "--subresource=log")
    assert not hub.can_i("list", "pods", "-n", "default")
    listing = hub.kubectl("auth", "can-i", "--list").stdout
    assert any(row.split()[:2] == ["pods", "[]"] and "[get watch list create delete]" in row
               for row in listing.splitlines()), listing
    whoami = hub.kubectl("auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["groups"] == [
        "system:serviceaccounts", "system:serviceaccounts:jhub", "system:authenticated"]
    # the admin asks on its behalf, impersonating it
    assert sim.kubectl("auth", "can-i", "create", "pods", "-n", "jhub", f"--as={HUB}").stdout.strip() == "yes"
    assert sim.kubectl("auth", "can-i", "patch", "pods", "-n", "jhub", f"--as={HUB}",
                       check=False).stdout.strip() == "no"
    # ... which the service account itself may not do
    out = hub.kubectl("get", "pods", "--as=alice")
    assert out.returncode == 1 and (f'users "alice" is forbidden: User "{HUB}" cannot impersonate resource "users" '
                                    'in API group "" at the cluster scope') in out.stderr

    # one more rule (a Role of its own, as helm-values/rbac.yaml adds) and the patch goes through
    apply(sim, role("hub-patch", "jhub", {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}),
          binding("hub-patch", "jhub", "Role", "hub-patch", sa("hub", "jhub")))
    patched = core.patch_namespaced_pod("jupyter-alice", "jhub", {"metadata": {"annotations": {"a": "b"}}})
    assert patched.metadata.annotations == {"a": "b"} and hub.can_i("patch", "pods")


def test_groups_cluster_roles_resource_names_and_the_default_roles(sim: Sim, tmp_path: Path) -> None:
    make_namespace(sim, "team")
    reader = Identity(sim, "team", "reader", tmp_path)
    core = reader.core()
    assert not reader.can_i("get", "pods")
    # the built-in `view`, bound to every service account of the namespace (a group subject)
    apply(sim, binding("all-view", "team", "ClusterRole", "view",
                       {"kind": "Group", "name": "system:serviceaccounts:team"}))
    assert reader.can_i("list", "pods") and reader.can_i("get", "pods", "--subresource=log") and not reader.can_i("delete", "pods")
    assert not reader.can_i("get", "secrets")  # view does not read secrets
    # a ClusterRoleBinding to every service account in the cluster
    apply(sim, role("node-reader", "", {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
                    kind="ClusterRole"),
          binding("node-reader", "", "ClusterRole", "node-reader", {"kind": "Group", "name": "system:serviceaccounts"},
                  kind="ClusterRoleBinding"))
    assert [n.metadata.name for n in core.list_node().items] == ["node-1"]
    # resourceNames: one secret (view reads none), and only by name
    sim.kubectl("create", "secret", "generic", "only", "-n", "team")
    sim.kubectl("create", "secret", "generic", "other", "-n", "team")
    apply(sim, role("one-secret", "team", {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["only"],
                                           "verbs": ["get"]}),
          binding("one-secret", "team", "Role", "one-secret", sa("reader", "team")))
    assert core.read_namespaced_secret("only", "team").metadata.name == "only"
    assert refused(core.read_namespaced_secret, "other", "team")["message"] == (
        'secrets "other" is forbidden: User "system:serviceaccount:team:reader" cannot get resource "secrets" in API '
        'group "" in the namespace "team"')
    assert not reader.can_i("list", "secrets")
    # a binding to a role that does not exist says so, after the refusal
    apply(sim, binding("dangling", "team", "Role", "nope", sa("reader", "team")))
    assert refused(core.delete_namespaced_secret, "only", "team")["message"] == (
        'secrets "only" is forbidden: User "system:serviceaccount:team:reader" cannot delete resource '
        '"secrets" in API group "" in the namespace "team": RBAC: role.rbac.authorization.k8s.io "nope" not found')
    # every authenticated user may discover the API and ask what it may do; anonymous may not
    assert reader.kubectl("api-resources").returncode == 0
    status, body = sim.http("GET", "/api", token=None)  # the plain-HTTP port: system:unsecured, all-powerful
    assert status == 200


def test_aggregated_cluster_roles_follow_their_selectors(sim: Sim, tmp_path: Path) -> None:
    rules = lambda name: json.loads(sim.kubectl("get", "clusterrole", name, "-o", "json").stdout).get("rules")  # noqa: E731
    apply(sim, {**role("monitoring", "", kind="ClusterRole"),
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-monitoring":
                                                                              "true"}}]}})
    part = role("monitoring-pods", "", {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                kind="ClusterRole")
    part["metadata"]["labels"] = {"example.com/aggregate-to-monitoring": "true"}
    apply(sim, part)
    assert rules("monitoring") == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    sim.kubectl("label", "clusterrole", "monitoring-pods", "example.com/aggregate-to-monitoring-")
    assert not rules("monitoring")
    # the default admin/edit/view are aggregated the same way: edit holds view's rules
    view, edit = rules("view"), rules("edit")
    assert view and all(r in edit for r in view)
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in edit
    assert {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]} in rules("admin")


def test_roles_and_bindings_cannot_grant_more_than_their_author_holds(sim: Sim, tmp_path: Path) -> None:
    make_namespace(sim, "esc")
    apply(sim, role("rbac-manager", "esc",
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
                     "verbs": ["create", "get", "update", "patch"]},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}),
          binding("rbac-manager", "esc", "Role", "rbac-manager", sa("manager", "esc")))
    manager = Identity(sim, "esc", "manager", tmp_path)
    out = manager.kubectl("create", "role", "more", "--verb=get,patch,delete", "--resource=pods")
    assert out.returncode == 1 and out.stderr.strip() == (
        'Error from server (Forbidden): roles.rbac.authorization.k8s.io "more" is forbidden: user '
        '"system:serviceaccount:esc:manager" (groups=["system:serviceaccounts" "system:serviceaccounts:esc" '
        '"system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["patch" "delete"]}')
    assert manager.kubectl("create", "role", "less", "--verb=get", "--resource=pods").returncode == 0
    out = manager.kubectl("create", "rolebinding", "to-edit", "--clusterrole=edit", "--serviceaccount=esc:manager")
    assert out.returncode == 1 and "is attempting to grant RBAC permissions not currently held" in out.stderr
    # `bind` on that role lets it hand the role out; the admin may do anything
    apply(sim, role("bind-edit", "esc", {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                                         "resourceNames": ["edit"], "verbs": ["bind"]}),
          binding("bind-edit", "esc", "Role", "bind-edit", sa("manager", "esc")))
    assert manager.kubectl("create", "rolebinding", "to-edit", "--clusterrole=edit",
                           "--serviceaccount=esc:other").returncode == 0
    assert sim.kubectl("create", "role", "admin-made", "-n", "esc", "--verb=*", "--resource=*").returncode == 0


def test_rbac_objects_are_validated_and_served_like_the_apiserver(sim: Sim) -> None:
    status, body = sim.http("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/jhub/roles",
                            role("bad", "jhub", {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}))
    assert (status, body["message"]) == (422, (
        'Role.rbac.authorization.k8s.io "bad" is invalid: rules[0].nonResourceURLs: Invalid value: '
        '[]string{"/metrics"}: namespaced rules cannot apply to non-resource URLs'))
    status, body = sim.http("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                            binding("b", "", "Role", "x", {"kind": "ServiceAccount", "name": "hub"},
                                    kind="ClusterRoleBinding"))
    assert status == 422 and body["message"] == (
        'ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported value: "Role": '
        'supported values: "ClusterRole", subjects[0].namespace: Required value]')
    apply(sim, binding("fixed", "jhub", "ClusterRole", "view", {"kind": "User", "name": "carol"}))
    rb = json.loads(sim.kubectl("get", "rolebinding", "fixed", "-n", "jhub", "-o", "json").stdout)
    assert rb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]
    rb["roleRef"]["name"] = "edit"
    out = sim.kubectl("replace", "-f", "-", stdin=json.dumps(rb), check=False)
    assert out.returncode == 1 and "roleRef: Invalid value" in out.stderr and "cannot change roleRef" in out.stderr
    table = sim.kubectl("get", "rolebindings", "-n", "jhub", "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert any(row.split()[:2] == ["fixed", "ClusterRole/view"] and "carol" in row for row in table)
    resources = sim.kubectl("api-resources", "--api-group=rbac.authorization.k8s.io", "-o", "name").stdout.split()
    assert sorted(resources) == sorted(f"{r}.rbac.authorization.k8s.io" for r in (
        "clusterrolebindings", "clusterroles", "rolebindings", "roles"))


def test_pods_get_the_service_account_token_volume(sim: Sim) -> None:
    created = sim.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(pod_manifest("with-token")))
    spec = json.loads(created.stdout)["spec"]
    assert spec["serviceAccountName"] == "default"
    [volume] = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
    assert volume["projected"] == {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}
    assert spec["containers"][0]["volumeMounts"] == [{"name": volume["name"], "readOnly": True,
                                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    ca = json.loads(sim.kubectl("get", "configmap", "kube-root-ca.crt", "-o", "json").stdout)["data"]["ca.crt"]
    assert ca == sim.server.ca_pem.decode()
    # automountServiceAccountToken: false on the pod, or on its account, leaves it out
    no_mount = pod_manifest("no-token", automountServiceAccountToken=False)
    assert "volumes" not in json.loads(sim.kubectl("create", "-f", "-", "-o", "json",
                                                   stdin=json.dumps(no_mount)).stdout)["spec"]
    apply(sim, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet", "namespace": "jhub"},
                "automountServiceAccountToken": False})
    quiet = pod_manifest("quiet-pod", serviceAccountName="quiet")
    assert "volumes" not in json.loads(sim.kubectl("create", "-f", "-", "-o", "json",
                                                   stdin=json.dumps(quiet)).stdout)["spec"]
    # the account must exist, as the ServiceAccount admission plugin requires
    status, body = sim.http("POST", "/api/v1/namespaces/jhub/pods", pod_manifest("orphan", serviceAccountName="ghost"))
    assert (status, body["message"]) == (403, 'pods "orphan" is forbidden: error looking up service account '
                                              'jhub/ghost: serviceaccount "ghost" not found')


def test_service_account_tokens_live_and_die_with_what_they_are_bound_to(sim: Sim, tmp_path: Path) -> None:
    make_namespace(sim, "tokens")
    apply(sim, binding("view", "tokens", "ClusterRole", "view", {"kind": "Group", "name": "system:serviceaccounts:tokens"}))
    worker = Identity(sim, "tokens", "worker", tmp_path)
    assert worker.core().list_namespaced_pod("tokens").items == []
    status, body = sim.http("POST", "/api/v1/namespaces/tokens/serviceaccounts/worker/token",
                            {"spec": {"expirationSeconds": 60}})
    assert (status, body["message"]) == (422, 'TokenRequest.authentication.k8s.io "worker" is invalid: '
                                              'spec.expirationSeconds: Invalid value: 60: may not specify a duration '
                                              'less than 10 minutes')
    other_audience = sim.kubectl("create", "token", "worker", "-n", "tokens", "--audience=vault").stdout.strip()
    assert sim.http("GET", "/api/v1/namespaces/tokens/pods", token=other_audience)[0] == 401
    # bound to a pod: valid while the pod is, not once it is gone
    sim.call(sim.cluster.create, POD, pod_manifest("holder", serviceAccountName="worker"), "tokens")
    bound = sim.kubectl("create", "token", "worker", "-n", "tokens", "--bound-object-kind=Pod",
                        "--bound-object-name=holder").stdout.strip()
    assert sim.http("GET", "/api/v1/namespaces/tokens/pods", token=bound)[0] == 200
    sim.call(sim.cluster.store.remove, POD, "tokens", "holder")
    assert sim.http("GET", "/api/v1/namespaces/tokens/pods", token=bound)[0] == 401
    # an account deleted (and made again) takes its tokens with it
    sim.kubectl("delete", "serviceaccount", "worker", "-n", "tokens")
    sim.kubectl("create", "serviceaccount", "worker", "-n", "tokens")
    assert sim.http("GET", "/api/v1/namespaces/tokens/pods", token=worker.token)[0] == 401


def test_creating_in_a_terminating_namespace_is_forbidden(sim: Sim) -> None:
    make_namespace(sim, "t1")
    # a pod still stopping on its node keeps the namespace Terminating
    sim.call(sim.cluster.create, POD, pod_manifest("slow", nodeName="node-1", terminationGracePeriodSeconds=600), "t1")
    sim.kubectl("delete", "namespace", "t1", "--wait=false")
    status, body = sim.http("POST", "/api/v1/namespaces/t1/configmaps", {"metadata": {"name": "late"}})
    assert (status, body) == (403, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": 'configmaps "late" is forbidden: unable to create new content in namespace t1 because it is '
                   "being terminated",
        "details": {"name": "late", "kind": "configmaps", "causes": [{
            "reason": "NamespaceTerminating", "message": "namespace t1 is being terminated",
            "field": "metadata.namespace"}]}})
    out = sim.kubectl("create", "configmap", "late", "-n", "t1", check=False)
    assert out.stderr.strip() == ('error: failed to create configmap: configmaps "late" is forbidden: unable to create '
                                  'new content in namespace t1 because it is being terminated')
    status, body = sim.http("POST", "/api/v1/namespaces/t1/pods", pod_manifest("late-pod"))
    assert status == 403 and body["message"].startswith('pods "late-pod" is forbidden: unable to create new content')


def test_the_cluster_claims_one_kubernetes_version(sim: Sim) -> None:
    from gpu_reclaim_sim.kubelet import nodes
    from gpu_reclaim_sim import scenario

    version = sim.http("GET", "/version", token=None)[1]["gitVersion"]
    group = scenario.from_dict({"nodeGroups": [{"name": "cpu"}]}).node_groups[0]
    manifest = nodes.node_manifest("n", group, sim.cluster.scenario)
    assert manifest["status"]["nodeInfo"]["kubeletVersion"] == version
    assert json.loads(sim.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"] == version


# --- inside a pod ---------------------------------------------------------------------------

IN_POD = r'''
import asyncio, json, os
from kubernetes import client, config
from kubernetes.client.rest import ApiException

base = "/var/run/secrets/kubernetes.io/serviceaccount"
namespace = open(f"{base}/namespace").read()
out = {"files": sorted(f for f in os.listdir(base) if not f.startswith("..")), "namespace": namespace,
       "host": os.environ["KUBERNETES_SERVICE_HOST"], "https": os.environ["KUBERNETES_SERVICE_PORT_HTTPS"]}
config.load_incluster_config()
core = client.CoreV1Api()
out["official"] = [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
try:
    core.list_node()
except ApiException as e:
    out["nodes"] = [e.status, json.loads(e.body)["message"]]

async def main():
    from kubespawner.clients import load_config, shared_client  # what KubeSpawner does in a hub pod
    load_config()
    api = shared_client("CoreV1Api")
    pods = await api.list_namespaced_pod(namespace)
    out["kubespawner"] = [p.metadata.name for p in pods.items]

asyncio.run(main())
print(json.dumps(out), flush=True)
'''


@pytest.mark.skipif(not sandbox_available(), reason="pods get their own mounts only as root")
def test_in_cluster_config_works_in_a_pod(tmp_path: Path) -> None:
    scenario = {"name": "in-cluster", "namespaces": ["jhub"], "mode": "process", "bandwidth": "10GB/s",
                "defaultImageSize": "1MB", "nodeGroups": [{"name": "cpu", "count": 1}]}
    with sim_running(tmp_path, scenario) as child:
        def kubectl(*args: str, stdin: str | None = None) -> str:
            proc = sim_kubectl(child, *args, stdin=stdin, check=False)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        kubectl("create", "serviceaccount", "reader", "-n", "jhub")
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            role("pod-reader", "jhub", {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}),
            binding("pod-reader", "jhub", "Role", "pod-reader", sa("reader", "jhub"))]))
        kubectl("create", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "in-cluster", "namespace": "jhub"},
            "spec": {"serviceAccountName": "reader", "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "python:3.11", "command": ["python", "-c", IN_POD]}]}}))
        deadline = time.monotonic() + 60
        phase = ""
        while time.monotonic() < deadline and phase not in ("Succeeded", "Failed"):
            time.sleep(0.5)
            phase = kubectl("get", "pod", "in-cluster", "-n", "jhub", "-o", "jsonpath={.status.phase}")
        logs = kubectl("logs", "in-cluster", "-n", "jhub")
        assert phase == "Succeeded", logs
        seen = json.loads(logs.strip().splitlines()[-1])
        assert seen["files"] == ["ca.crt", "namespace", "token"] and seen["namespace"] == "jhub"
        # through the `kubernetes` Service, as on a real cluster
        service = json.loads(kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json"))
        assert (seen["host"], seen["https"]) == (service["spec"]["clusterIP"], "443")
        assert seen["official"] == seen["kubespawner"] == ["in-cluster"]
        assert seen["nodes"] == [403, 'nodes is forbidden: User "system:serviceaccount:jhub:reader" cannot list '
                                      'resource "nodes" in API group "" at the cluster scope']
        # the nodes' kubelets claim the version the API server does
        assert kubectl("get", "nodes", "-o", "jsonpath={.items[0].status.nodeInfo.kubeletVersion}") == json.loads(
            kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]


def test_subject_access_and_token_reviews(sim: Sim, tmp_path: Path) -> None:
    from kubernetes.client import AuthenticationV1Api, AuthorizationV1Api

    apply(sim, role("hub", "jhub", *CHART_HUB_RULES), binding("hub", "jhub", "Role", "hub", sa("hub", "jhub")))
    admin = k8s_config.new_client_from_config(str(sim.kubeconfig))
    authz = AuthorizationV1Api(admin)

    def review(verb: str, namespace: str = "jhub") -> Any:
        return authz.create_subject_access_review({"spec": {
            "user": HUB, "groups": ["system:serviceaccounts", "system:serviceaccounts:jhub", "system:authenticated"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": "pods"}}}).status

    allowed = review("create")
    assert allowed.allowed and allowed.reason == ('RBAC: allowed by RoleBinding "hub/jhub" of Role "hub" to '
                                                  'ServiceAccount "hub/jhub"')
    assert not review("update").allowed and not review("create", "default").allowed
    local = authz.create_namespaced_local_subject_access_review("jhub", {"spec": {
        "user": HUB, "resourceAttributes": {"namespace": "jhub", "verb": "list", "resource": "pods"}}})
    assert local.status.allowed
    # the hub may ask about itself, not about others
    hub = Identity(sim, "jhub", "hub", tmp_path)
    with pytest.raises(ApiException) as e:
        AuthorizationV1Api(k8s_config.new_client_from_config(str(hub.kubeconfig))).create_subject_access_review(
            {"spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}})
    assert e.value.status == 403
    tokens = AuthenticationV1Api(admin)
    assert tokens.create_token_review({"spec": {"token": hub.token}}).status.user.username == HUB
    assert not tokens.create_token_review({"spec": {"token": "not-a-token"}}).status.authenticated
