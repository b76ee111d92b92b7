"""The simulator's NetworkPolicy model (gpu_reclaim_sim/network/netpol.py) without the
kernel: selectors, ports, ipBlocks and the address view, on pods that are only data (the
policies enforced on real connections: test_netpol.py)."""

from __future__ import annotations

import ipaddress
import random

from gpu_reclaim_sim.network import netpol

VIEW = netpol.AddressView([ipaddress.ip_network("127.50.0.0/16"), ipaddress.ip_network("127.51.0.0/16")])


def _pod(name: str, labels: dict, ip: str, ns: str = "a", ports: dict | None = None) -> netpol.Pod:
    return netpol.Pod(name, ns, labels, ip, f"cg/{name}", {(n, "TCP"): p for n, p in (ports or {}).items()})


def _compile(*specs: dict, pods: list[netpol.Pod], namespaces: dict | None = None) -> netpol.Compiled:
    policies = [{"metadata": {"namespace": s.pop("namespace", "a"), "name": f"p{i}"}, "spec": s}
                for i, s in enumerate(specs)]
    return netpol.compile_policies(policies, pods, namespaces or {"a": {}, "b": {"team": "b"}}, VIEW)


def test_model_isolation_is_per_direction_and_rules_only_add():
    x, y, z = _pod("x", {"app": "x"}, "127.50.0.1"), _pod("y", {"app": "y"}, "127.50.0.2"), _pod("z", {}, "127.50.0.3")
    c = _compile({"podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Ingress"],
                  "egress": [{"to": [{"podSelector": {}}]}]}, pods=[x, y, z])
    assert not c.allows(y, x.ip, 80) and c.allows(x, y.ip, 80)  # x isolated for ingress only
    c = _compile({"podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Egress"]}, pods=[x, y, z])
    assert not c.allows(x, y.ip, 80) and c.allows(y, x.ip, 80) and c.allows(x, x.ip, 80)
    c = _compile({"podSelector": {}, "ingress": [{}]}, {"podSelector": {"matchLabels": {"app": "x"}}},
                 pods=[x, y, z])
    assert c.allows(y, x.ip, 1) and c.allows(None, x.ip, 65535)  # one policy allows all: the other adds nothing
    c = _compile({"podSelector": {}, "ingress": [{"from": []}], "namespace": "b"}, pods=[x, y])
    assert c.allows(y, x.ip, 80)  # a policy of another namespace selects no pod here


def test_model_selectors_ports_and_other_namespaces():
    db = _pod("db", {"app": "db"}, "127.50.0.1", ports={"pg": 5432})
    web = _pod("web", {"role": "web"}, "127.50.0.2")
    b_web = _pod("bweb", {"role": "web"}, "127.50.0.3", ns="b")
    b_any = _pod("bany", {}, "127.50.0.4", ns="b")
    both = {"namespaceSelector": {"matchLabels": {"team": "b"}}, "podSelector": {"matchLabels": {"role": "web"}}}
    c = _compile({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [
        {"from": [both], "ports": [{"port": "pg", "protocol": "TCP"}]},
        {"from": [{"podSelector": {"matchLabels": {"role": "web"}}}], "ports": [{"port": 7000, "endPort": 7002}]},
        {"ports": [{"port": 9000, "protocol": "UDP"}, {"port": "pg", "protocol": "UDP"}]},
        {"ports": [{"protocol": "TCP"}], "from": [{"namespaceSelector": {"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["b"]}]}, "podSelector": {"matchExpressions": [
                {"key": "role", "operator": "DoesNotExist"}]}}]}]}, pods=[db, web, b_web, b_any])
    assert c.allows(b_web, db.ip, 5432) and not c.allows(web, db.ip, 5432)  # AND: both selectors
    assert [c.allows(web, db.ip, p) for p in (6999, 7000, 7002, 7003)] == [False, True, True, False]
    assert not c.allows(b_web, db.ip, 7000)  # a podSelector alone means the policy's namespace
    assert not c.allows(None, db.ip, 9000)  # a rule of UDP ports allows no TCP connection
    assert c.allows(b_any, db.ip, 1) and not c.allows(b_web, db.ip, 1)  # a protocol without a port: every port


def test_model_sees_pods_at_private_addresses_as_z2jhs_rules_expect():
    user = _pod("user", {"component": "singleuser-server"}, "127.50.0.9")
    hub = _pod("hub", {"component": "hub"}, "127.50.0.2", ports={"http": 8081})
    non_private = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                               "169.254.169.254/32"]}}
    c = _compile({"podSelector": {"matchLabels": {"component": "singleuser-server"}}, "policyTypes": ["Egress"],
                  "egress": [{"to": [{"podSelector": {"matchLabels": {"component": "hub"}}}],
                              "ports": [{"port": 8081}]},
                             {"to": [non_private]}]}, pods=[user, hub])
    assert c.allows(user, hub.ip, 8081) and not c.allows(user, hub.ip, 10101)  # hub: private
    assert not c.allows(user, "127.51.3.4", 80)  # a cluster IP: private
    assert c.allows(user, "127.0.0.1", 80) and c.allows(user, "8.8.8.8", 443)  # the host, the internet
    assert not c.allows(user, "10.50.0.2", 8081) and not c.allows(user, "169.254.169.254", 80)
    # ipBlocks written with the simulator's own addresses mean the same pods
    assert VIEW.ip_block({"cidr": "127.50.0.9/32"}) == VIEW.ip_block({"cidr": "10.50.0.9/32"})
    assert VIEW.actual(VIEW.ip_block({"cidr": "10.0.0.0/8"})) == [
        (int(ipaddress.IPv4Address("10.0.0.0")), int(ipaddress.IPv4Address("10.255.255.255"))),
        (int(ipaddress.IPv4Address("127.50.0.0")), int(ipaddress.IPv4Address("127.51.255.255")))]


def test_model_ip_blocks_admit_outside_sources_by_address_and_pods_by_theirs():
    db = _pod("db", {"app": "db"}, "127.50.0.1")
    a, b = _pod("a", {}, "127.50.0.7"), _pod("b", {}, "127.50.1.7")
    c = _compile({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [
        {"from": [{"ipBlock": {"cidr": "127.50.0.0/16", "except": ["127.50.1.0/24"]}},
                  {"ipBlock": {"cidr": "127.0.0.0/24"}}]}]}, pods=[db, a, b])
    assert c.allows(a, db.ip, 80) and not c.allows(b, db.ip, 80)
    assert c.allows(None, db.ip, 80, src_ip="127.0.0.1") and not c.allows(None, db.ip, 80, src_ip="127.0.1.1")


def test_disjoint_boxes_cover_the_same_area_without_overlaps():
    rng = random.Random(7)
    for _ in range(200):
        boxes = []
        for _ in range(rng.randint(1, 8)):
            a, p = sorted(rng.sample(range(40), 2)), sorted(rng.sample(range(20), 2))
            boxes.append(((a[0], a[1]), (p[0], p[1])))
        out = netpol.disjoint(boxes)
        cover = lambda bs: {(x, y) for (a, p) in bs for x in range(a[0], a[1] + 1)  # noqa: E731
                            for y in range(p[0], p[1] + 1)}
        assert cover(out) == cover(boxes)
        assert sum((a[1] - a[0] + 1) * (p[1] - p[0] + 1) for a, p in out) == len(cover(out))
    assert netpol.disjoint([((1, 1), (80, 80)), ((0, 5), (0, 100))]) == [((0, 5), (0, 100))]
    assert netpol.disjoint([]) == []
