"""NetworkPolicies enforced on every connection a pod opens, and Services reached through
kube-proxy's nftables rules, on the real simulator with real pods and the real kubectl.

Each pod runs a small agent (tests/support/netpol_agents.py) that opens TCP connections from
inside the pod and writes what happened; the test process itself is a client from outside
the cluster. The model's own semantics, without the kernel: test_netpol_model.py.

The data plane needs root, nftables and a cgroup2 mount; elsewhere the end-to-end tests
skip, saying so.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
import threading

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gpu_reclaim_sim.kubelet import cgroups
from gpu_reclaim_sim.network import nftables
from gpu_reclaim_sim.z2jh import release as z2jh
from gpu_reclaim_sim.launch import start_sim

from ..support.netpol_agents import (IMAGE, NS, Agents, answer, apply, becomes, cleanup, listening_addresses,
                                     nft_tables, policy, probe, service)
from ..support.sim_cluster import kubectl, sim_running, wait_for

SCENARIO = {
    # every namespace a test uses is the run's, so that the run takes it away (the plane is shared)
    "name": "netpol", "namespaces": [NS, "team-a", "jhub"], "mode": "process",
    "images": [{"name": IMAGE, "size": "50MB"}],
    "nodeGroups": [{"name": "cpu", "count": 1, "cpu": "64", "memory": "256Gi", "pods": 250, "images": [IMAGE]}],
}
UNAVAILABLE = "no writable cgroup2 mount, or not root" if not cgroups.available() else nftables.unavailable()
needs_dataplane = pytest.mark.skipif(bool(UNAVAILABLE), reason=f"the simulator's data plane needs root, nftables "
                                                              f"and cgroup2: {UNAVAILABLE}")


@pytest.fixture(scope="module")
def sim(control_plane, tmp_path_factory):
    if UNAVAILABLE:
        pytest.skip(f"the simulator's data plane needs root, nftables and cgroup2: {UNAVAILABLE}")
    workdir = tmp_path_factory.mktemp("netpol")
    with sim_running(workdir, SCENARIO, control_plane) as child:
        child.info["control_dir"] = workdir / "control"
        child.info["control_dir"].mkdir()
        yield child


@pytest.fixture(scope="module")
def core(sim) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(sim.info["kubeconfig"]))


@pytest.fixture(scope="module")
def agents(sim, core) -> Agents:
    return Agents(sim, core)


# --- Services -----------------------------------------------------------------------------

@needs_dataplane
def test_services_go_to_random_endpoints_through_the_kernel(sim, core, agents):
    for i in range(2):
        agents.start(f"web-{i}", {"app": "web"}, {"http": 8080})
    agents.start("client", {"role": "client"})
    apply(sim, service("web", {"app": "web"}, [{"name": "http", "port": 80, "targetPort": "http"}]),
          service("public", {"app": "web"}, [{"name": "http", "port": 80, "targetPort": 8080}], type="LoadBalancer"),
          service("nobody", {"app": "none"}, [{"port": 80}]))
    web = core.read_namespaced_service("web", NS).spec.cluster_ip
    lb = wait_for(lambda: core.read_namespaced_service("public", NS).status.load_balancer.ingress, "LB address")[0].ip
    wait_for(lambda: probe(web, 80).startswith("open"), "the cluster IP answering")
    wait_for(lambda: probe(lb, 80).startswith("open"), "the load balancer's address answering")  # its rules may come later
    # from the host and from a pod, by address and by name, spread over both endpoints
    seen = {probe(web, 80) for _ in range(40)} | {probe(lb, 80) for _ in range(20)}
    assert seen == {"open web-0:8080", "open web-1:8080"}
    assert {agents.probe("client", "web", 80) for _ in range(20)} <= {"open web-0:8080", "open web-1:8080"}
    assert agents.probe("client", f"web.{NS}.svc.cluster.local", 80).startswith("open web-")
    # no process listens on the Service's addresses: the kernel rewrites the connections
    assert not {web, lb} & listening_addresses()
    # a Service without endpoints refuses, as kube-proxy's reject rule does
    nobody = core.read_namespaced_service("nobody", NS).spec.cluster_ip
    assert probe(nobody, 80) == "refused"
    assert agents.probe("client", nobody, 80) == "refused"


# --- NetworkPolicy ------------------------------------------------------------------------

@needs_dataplane
def test_default_deny_ingress_then_allow_from_labelled_pods(sim, core, agents):
    db = agents.ensure("db", {"app": "db"}, {"pg": 5432, "admin": 5433})
    agents.ensure("frontend", {"role": "frontend"})
    agents.ensure("intruder", {"role": "other"})
    apply(sim, service("db", {"app": "db"}, [{"name": "pg", "port": 5432, "targetPort": "pg"}]))
    db_svc = core.read_namespaced_service("db", NS).spec.cluster_ip
    wait_for(lambda: probe(db_svc, 5432).startswith("open"), "db Service")
    for client in ("frontend", "intruder"):
        assert agents.probe(client, db, 5432) == "open db:5432"
    try:
        apply(sim, policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress"]}))
        becomes(lambda: agents.probe("frontend", db, 5432), "unreachable", "frontend -> db under default deny")
        assert agents.probe("intruder", db, 5432) == "unreachable"
        assert agents.probe("frontend", db_svc, 5432) == "unreachable"  # through the Service too
        assert probe(db, 5432) == "unreachable"  # and from outside the cluster
        assert agents.probe("db", db, 5432) == "open db:5432"  # a pod reaches itself
        assert agents.probe("db", db_svc, 5432) == "open db:5432"  # also through its Service

        apply(sim, policy("db-from-frontend", {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                         "ports": [{"port": "pg"}]}]}))
        becomes(lambda: agents.probe("frontend", db, 5432), "open db:5432", "frontend -> db once allowed")
        assert agents.probe("frontend", db_svc, 5432) == "open db:5432"
        assert agents.probe("frontend", db, 5433) == "unreachable"  # another port
        assert agents.probe("intruder", db, 5432) == "unreachable"
        assert probe(db, 5432) == "unreachable"
        # labels are followed: the intruder labelled frontend gets in
        kubectl(sim, "-n", NS, "label", "pod", "intruder", "role=frontend", "--overwrite")
        becomes(lambda: agents.probe("intruder", db, 5432), "open db:5432", "relabelled pod -> db")
        assert "db-from-frontend" in kubectl(sim, "-n", NS, "get", "netpol").stdout
    finally:
        cleanup(sim)
    becomes(lambda: probe(db, 5433), "open db:5433", "db open again without policies")


@needs_dataplane
def test_namespace_selectors_alone_and_anded_with_pod_selectors(sim, core, agents):
    db = agents.ensure("db", {"app": "db"}, {"pg": 5432, "admin": 5433})
    core.patch_namespace("team-a", {"metadata": {"labels": {"team": "a"}}})
    agents.start("a-client", {"role": "client"}, ns="team-a")
    agents.start("a-other", {"role": "other"}, ns="team-a")
    agents.start("np-client", {"role": "client"})
    team_a = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    clients = {"podSelector": {"matchLabels": {"role": "client"}}}
    db_pods = {"matchLabels": {"app": "db"}}
    try:
        apply(sim, policy("and", {"podSelector": db_pods, "ingress": [{"from": [{**team_a, **clients}]}]}))
        becomes(lambda: agents.probe("a-other", db, 5432, ns="team-a"), "unreachable", "team-a other -> db")
        assert agents.probe("a-client", db, 5432, ns="team-a") == "open db:5432"
        assert agents.probe("np-client", db, 5432) == "unreachable"  # a client, but not in team a

        apply(sim, policy("and", {"podSelector": db_pods, "ingress": [{"from": [team_a, clients]}]}))
        becomes(lambda: agents.probe("np-client", db, 5432), "open db:5432", "or: np client -> db")
        assert agents.probe("a-other", db, 5432, ns="team-a") == "open db:5432"
        # namespaces' labels are followed too
        kubectl(sim, "label", "namespace", "team-a", "team-")
        becomes(lambda: agents.probe("a-other", db, 5432, ns="team-a"), "unreachable", "unlabelled namespace -> db")
        assert agents.probe("np-client", db, 5432) == "open db:5432"
    finally:
        cleanup(sim)


@needs_dataplane
def test_egress_is_enforced_also_to_service_cluster_ips_and_the_host(sim, core, agents):
    db = agents.ensure("db", {"app": "db"}, {"pg": 5432, "admin": 5433})
    agents.ensure("web-0", {"app": "web"}, {"http": 8080})
    agents.ensure("frontend", {"role": "frontend"})
    apply(sim, service("db", {"app": "db"}, [{"name": "pg", "port": 5432, "targetPort": "pg"}]),
          service("web", {"app": "web"}, [{"name": "http", "port": 80, "targetPort": "http"}]))
    locked = agents.start("locked", {"app": "locked"})
    host = socket.create_server(("127.0.0.1", 0))
    host_port = host.getsockname()[1]
    threading.Thread(target=answer, args=(host, "host"), daemon=True).start()
    try:
        assert agents.probe("locked", "web", 80).startswith("open web-")
        assert agents.probe("locked", "127.0.0.1", host_port) == "open host"
        apply(sim, policy("locked-egress", {
            "podSelector": {"matchLabels": {"app": "locked"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}], "ports": [{"port": 5432}]}]}))
        becomes(lambda: agents.probe("locked", "web", 80), "unreachable", "locked -> web Service")
        assert agents.probe("locked", db, 5432) == "open db:5432"
        assert agents.probe("locked", "db", 5432) == "open db:5432"  # its Service: judged after the DNAT
        assert agents.probe("locked", db, 5433) == "unreachable"
        assert agents.probe("locked", "127.0.0.1", host_port) == "unreachable"
        assert agents.probe("locked", locked, 9) == "refused"  # itself: allowed (nothing listens)
        assert agents.probe("frontend", "web", 80).startswith("open")  # others are not isolated

        apply(sim, policy("locked-to-host", {
            "podSelector": {"matchLabels": {"app": "locked"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}]}]}))
        becomes(lambda: agents.probe("locked", "127.0.0.1", host_port), "open host", "locked -> host by ipBlock")
        assert agents.probe("locked", "web", 80) == "unreachable"
        kubectl(sim, "-n", NS, "delete", "networkpolicy", "locked-to-host")

        # a new pod is isolated from the first instant its process runs (CNI ADD comes first)
        becomes(lambda: agents.probe("locked", "127.0.0.1", host_port), "unreachable", "locked -> host again")
        agents.start("locked-2", {"app": "locked"}, boot_probe=f"127.0.0.1 {host_port}")
        assert (agents.control / f"{NS}.locked-2" / "boot").read_text() == "unreachable"
        agents.start("free", {"app": "free"}, boot_probe=f"127.0.0.1 {host_port}")
        assert (agents.control / f"{NS}.free" / "boot").read_text() == "open host"
    finally:
        host.close()
        cleanup(sim)


@needs_dataplane
def test_named_ports_port_ranges_and_protocols(sim, agents):
    ip = agents.start("ports", {"app": "ports"}, {"web": 8080, "other": 8081, "r0": 9000, "r1": 9001, "r2": 9002})
    agents.ensure("frontend", {"role": "frontend"})
    try:
        apply(sim, policy("ports", {"podSelector": {"matchLabels": {"app": "ports"}}, "ingress": [
            {"ports": [{"port": "web"}, {"port": 9000, "endPort": 9001}]},
            {"ports": [{"port": 8081, "protocol": "UDP"}]}]}))
        becomes(lambda: agents.probe("frontend", ip, 9002), "unreachable", "a port outside the range")
        results = {port: agents.probe("frontend", ip, port) for port in (8080, 8081, 9000, 9001, 9002)}
        assert results == {8080: "open ports:8080", 8081: "unreachable", 9000: "open ports:9000",
                           9001: "open ports:9001", 9002: "unreachable"}
        assert probe(ip, 8080) == "open ports:8080"  # no `from`: every source, the host's too
    finally:
        cleanup(sim)


@needs_dataplane
def test_ip_blocks_admit_the_host_and_pods_by_their_address(sim, agents):
    db = agents.ensure("db", {"app": "db"}, {"pg": 5432, "admin": 5433})
    frontend = agents.ensure("frontend", {"role": "frontend"})
    intruder = agents.ensure("intruder", {"role": "other"})
    pod_network = str(ipaddress.ip_network(f"{frontend}/16", strict=False))
    try:
        apply(sim, policy("from-host", {"podSelector": {"matchLabels": {"app": "db"}},
                                        "ingress": [{"from": [{"ipBlock": {"cidr": "127.0.0.1/32"}}]}]}))
        becomes(lambda: agents.probe("frontend", db, 5432), "unreachable", "a pod under a host-only ipBlock")
        assert probe(db, 5432) == "open db:5432"
        # a pod's own address, as e2e tests write it (status.podIP/32), and `except`
        apply(sim, policy("from-host", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [
            {"ipBlock": {"cidr": pod_network, "except": [f"{frontend}/32"]}}]}]}))
        becomes(lambda: agents.probe("intruder", db, 5432), "open db:5432", "a pod inside the ipBlock")
        assert agents.probe("frontend", db, 5432) == "unreachable"
        assert probe(db, 5432) == "unreachable"  # 127.0.0.1 is not in the pod network
        # pods are seen at private addresses, as a real cluster's: 10.0.0.0/8 holds them
        apply(sim, policy("from-host", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [
            {"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}))
        becomes(lambda: agents.probe("frontend", db, 5432), "open db:5432", "a pod in 10.0.0.0/8")
        assert probe(db, 5432) == "unreachable"
        assert intruder != frontend
    finally:
        cleanup(sim)


@needs_dataplane
def test_policies_are_validated_and_listed_as_the_apiserver_does(sim):
    bad = policy("bad", {"podSelector": {}, "ingress": [
        {"ports": [{"port": 70000}, {"port": "web", "endPort": 90}, {"protocol": "ICMP"}],
         "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}, "podSelector": {}}]}]})
    err = kubectl(sim, "-n", NS, "apply", "-f", "-", stdin=yaml.safe_dump(bad), check=False).stderr
    assert 'The NetworkPolicy "bad" is invalid' in err
    for message in ("spec.ingress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                    "spec.ingress[0].ports[1].endPort: Invalid value: 90: may not be specified when `port` is "
                    "non-numeric",
                    'spec.ingress[0].ports[2].protocol: Unsupported value: "ICMP": supported values: "TCP", '
                    '"UDP", "SCTP"',
                    "spec.ingress[0].from[0]: Required value: must specify a peer",
                    'spec.ingress[0].from[1].ipBlock.except[0]: Invalid value: "192.168.0.0/16": must be a strict '
                    "subset of `cidr`",
                    "spec.ingress[0].from[1]: Forbidden: may not specify both ipBlock and another peer"):
        assert message in err
    apply(sim, policy("defaulted", {"podSelector": {"matchLabels": {"app": "x"}}, "egress": [{}]}))
    try:
        stored = yaml.safe_load(kubectl(sim, "-n", NS, "get", "netpol", "defaulted", "-o", "yaml").stdout)
        assert stored["spec"]["policyTypes"] == ["Ingress", "Egress"]
        table = kubectl(sim, "-n", NS, "get", "netpol").stdout.splitlines()
        assert table[0].split() == ["NAME", "POD-SELECTOR", "AGE"] and table[1].split()[:2] == ["defaulted", "app=x"]
    finally:
        cleanup(sim)


# --- the z2jh chart's own policies --------------------------------------------------------

def _z2jh(extra: dict | None = None) -> list[dict]:
    return z2jh.render(z2jh.BASE, extra=extra)


@needs_dataplane
def test_the_z2jh_charts_policies_let_the_release_work_and_nothing_else(sim, core, agents):
    if reason := z2jh.missing():
        pytest.skip(reason)
    ns = "jhub"
    docs = _z2jh()
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    template = {n: kinds[("Deployment", n)]["spec"]["template"] for n in ("hub", "proxy")}
    values = yaml.safe_load(base64.b64decode(kinds[("Secret", "hub")]["data"]["values.yaml"]))
    # the pods as the chart's Deployments and KubeSpawner (with the chart's labels) make them
    singleuser = kinds[("NetworkPolicy", "singleuser")]["spec"]["podSelector"]["matchLabels"]
    user_labels = {**singleuser, **values["singleuser"]["extraLabels"]}
    hub = agents.start("hub", template["hub"]["metadata"]["labels"], {"http": 8081, "reclaim": 10101}, ns=ns)
    proxy = agents.start("proxy", template["proxy"]["metadata"]["labels"], {"http": 8000, "api": 8001}, ns=ns)
    user = agents.start("jupyter-alice", user_labels, {"notebook-port": 8888}, ns=ns)
    other_user = agents.start("jupyter-bob", user_labels, {"notebook-port": 8888}, ns=ns)
    assert [p["containerPort"] for c in template["hub"]["spec"]["containers"] for p in c["ports"]] == [8081]
    wanted = [d for d in docs if d["kind"] in ("NetworkPolicy", "Service")]
    apply(sim, *wanted, ns=ns)

    def flows() -> dict[str, str]:
        return {
            "proxy -> hub:8081": agents.probe("proxy", "hub", 8081, ns=ns),
            "proxy -> hub:10101": agents.probe("proxy", "hub", 10101, ns=ns),
            "proxy -> user:8888": agents.probe("proxy", user, 8888, ns=ns),
            "hub -> user:8888": agents.probe("hub", user, 8888, ns=ns),
            "hub -> proxy-api:8001": agents.probe("hub", "proxy-api", 8001, ns=ns),
            "hub -> hub:8081 (its own Service)": agents.probe("hub", "hub", 8081, ns=ns),
            "user -> hub:8081": agents.probe("jupyter-alice", "hub", 8081, ns=ns),
            "user -> proxy-public:80": agents.probe("jupyter-alice", "proxy-public", 80, ns=ns),
            "user -> hub:10101": agents.probe("jupyter-alice", "hub", 10101, ns=ns),
            "user -> hub pod:10101": agents.probe("jupyter-alice", hub, 10101, ns=ns),
            "user -> proxy-api:8001": agents.probe("jupyter-alice", proxy, 8001, ns=ns),
            "user -> other user:8888": agents.probe("jupyter-alice", other_user, 8888, ns=ns),
            "outside -> proxy-public": probe(wait_for(lambda: core.read_namespaced_service(
                "proxy-public", ns).status.load_balancer.ingress, "LB")[0].ip, 80),
            "outside -> hub:8081": probe(hub, 8081),
        }

    released = {
        "proxy -> hub:8081": "open hub:8081", "proxy -> hub:10101": "open hub:10101",
        "proxy -> user:8888": "open jupyter-alice:8888", "hub -> user:8888": "open jupyter-alice:8888",
        "hub -> proxy-api:8001": "open proxy:8001", "hub -> hub:8081 (its own Service)": "open hub:8081",
        "user -> hub:8081": "open hub:8081", "user -> proxy-public:80": "open proxy:8000",
        "user -> hub:10101": "unreachable", "user -> hub pod:10101": "unreachable",
        "user -> proxy-api:8001": "unreachable", "user -> other user:8888": "unreachable",
        "outside -> proxy-public": "open proxy:8000", "outside -> hub:8081": "unreachable",
    }
    try:
        becomes(lambda: agents.probe("jupyter-alice", other_user, 8888, ns=ns), "unreachable", "user -> user")
        assert flows() == released
        # the service's port is open to the proxy only because helm-values/gpu-reclaim.yaml
        # says so, and also where the chart's broad private-IP egress rules are turned off
        # (or ignored for pods, as Cilium does); users stay out even with them on
        apply(sim, *[d for d in _z2jh({"hub": {"networkPolicy": {"ingress": []}}}) if d["kind"] == "NetworkPolicy"],
              ns=ns)
        becomes(lambda: agents.probe("proxy", "hub", 10101, ns=ns), "unreachable", "proxy -> 10101 without the rule")
        tight = {"proxy": {"chp": {"networkPolicy": {"egressAllowRules": {"privateIPs": False}}}},
                 "singleuser": {"networkPolicy": {"egressAllowRules": {"privateIPs": True}}}}
        apply(sim, *[d for d in _z2jh(tight) if d["kind"] == "NetworkPolicy"], ns=ns)
        becomes(lambda: agents.probe("proxy", "hub", 10101, ns=ns), "open hub:10101", "proxy -> 10101, tight")
        assert agents.probe("jupyter-alice", hub, 10101, ns=ns) == "unreachable"
        assert agents.probe("jupyter-alice", other_user, 8888, ns=ns) == "unreachable"  # ingress still guards
    finally:
        cleanup(sim, ns)


# --- the table's life ---------------------------------------------------------------------

@needs_dataplane
def test_drop_mode_and_the_table_of_a_killed_simulator(tmp_path):
    scenario = {**SCENARIO, "name": "netpol-drop", "networkPolicyDeny": "drop"}
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    first = start_sim(tmp_path / "first", tmp_path / "scenario.yaml")
    try:
        core = k8s.CoreV1Api(k8s_config.new_client_from_config(first.info["kubeconfig"]))
        (tmp_path / "control").mkdir()
        first.info["control_dir"] = tmp_path / "control"
        agents = Agents(first, core)
        ip = agents.start("db", {"app": "db"}, {"pg": 5432})
        apply(first, policy("deny", {"podSelector": {}}))
        becomes(lambda: probe(ip, 5432, timeout=1), "timeout", "a dropped connection")
        table = [t for t in nft_tables() if f"_{first.proc.pid}_" in t]
        assert len(table) == 1
    finally:
        first.proc.kill()  # no chance to remove its table
        first.proc.wait()
    assert table[0] in nft_tables()
    second = start_sim(tmp_path / "second", tmp_path / "scenario.yaml")
    try:
        assert table[0] not in nft_tables()  # removed by the next simulator to start
        mine = [t for t in nft_tables() if f"_{second.proc.pid}_" in t]
        assert len(mine) == 1
    finally:
        second.stop()
    assert mine[0] not in nft_tables()  # and its own, on its way out
