"""Image-locality affinity: names, the index, capacity, the mode choice and term merging."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpu_reclaim_sim.api.imagerefs import normalize as sim_normalize
from jupyterhub_gpu_reclaim.spawner.images import normalize
from jupyterhub_gpu_reclaim.signals.kube import match_node_selector_term, parse_quantity
from jupyterhub_gpu_reclaim.spawner import affinity as a

D = "sha256:" + "ab" * 32
PURPOSE = {"matchExpressions": [{"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]}


def name_in(n: str) -> dict:
    return {"key": "metadata.name", "operator": "In", "values": [n]}


def node(name: str, *, images=(), cpu="4", memory="16Gi", gpu=None, pods="110", ready=True,
         labels=None, taints=None, unschedulable=False) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu is not None:
        alloc["nvidia.com/gpu"] = gpu
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "images": [{"names": list(n), "sizeBytes": s} for n, s in images],
        },
    }


def pod(cpu="1", memory="1Gi", gpu=None, priority=None, phase="Running") -> dict:
    req = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        req["nvidia.com/gpu"] = str(gpu)
    spec = {"containers": [{"name": "c", "resources": {"requests": req}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


# --- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("ref, full", [
    ("ubuntu", "docker.io/library/ubuntu:latest"),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("jupyter/base-notebook:2025-06-02", "docker.io/jupyter/base-notebook:2025-06-02"),
    ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    ("docker.io/library/ubuntu:latest", "docker.io/library/ubuntu:latest"),
    ("index.docker.io/jupyter/x", "docker.io/jupyter/x:latest"),
    ("index.docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    ("quay.io/a/b", "quay.io/a/b:latest"),
    ("localhost/x", "localhost/x:latest"),
    ("localhost:5000/x", "localhost:5000/x:latest"),
    ("registry:5000/x", "registry:5000/x:latest"),
    ("registry:5000/team/x:1.0", "registry:5000/team/x:1.0"),
    ("Upper/x", "docker.io/Upper/x:latest"),  # upper case: a Hub namespace, not a host
    (f"ubuntu@{D}", f"docker.io/library/ubuntu@{D}"),
    (f"ubuntu:22.04@{D}", f"docker.io/library/ubuntu@{D}"),  # the digest decides
    (f"registry:5000/x:1@{D}", f"registry:5000/x@{D}"),
    ("  quay.io/a/b:1 ", "quay.io/a/b:1"),
])
def test_normalize(ref, full):
    assert normalize(ref) == full
    # the simulated runtime names images on its own (from Kubernetes' documentation), and
    # the spawner's image locality agrees with it
    assert sim_normalize(ref) == full


# --- index --------------------------------------------------------------------------------

UBUNTU = (["docker.io/library/ubuntu@" + D, "docker.io/library/ubuntu:22.04"], 30_000_000)
TORCH = (["quay.io/jupyter/pytorch-notebook:cuda12"], 5_000_000_000)


def test_index_update_and_remove():
    idx = a.ImageIndex()
    idx.update(node("n1", images=[UBUNTU]))
    idx.update(node("n2", images=[UBUNTU, TORCH]))
    assert idx.nodes_with("ubuntu:22.04") == {"n1", "n2"}
    assert idx.nodes_with(f"ubuntu@{D}") == {"n1", "n2"}
    assert idx.nodes_with(f"docker.io/ubuntu:22.04@{D}") == {"n1", "n2"}
    assert idx.nodes_with("ubuntu") == set()  # :latest is another image
    assert idx.size_of("quay.io/jupyter/pytorch-notebook:cuda12") == 5_000_000_000
    assert idx.size_of("nope") is None
    idx.update(node("n2", images=[TORCH]))  # image garbage-collected on n2
    assert idx.nodes_with("ubuntu:22.04") == {"n1"}
    idx.remove("n1")
    assert idx.nodes_with("ubuntu:22.04") == set() and idx.size_of("ubuntu:22.04") is None
    assert "docker.io/library/ubuntu:22.04" not in idx._holders  # no empty leftovers
    idx.remove("unknown")
    idx.replace([node("n3", images=[UBUNTU])])
    assert idx.nodes() == {"n3"} and idx.nodes_with("quay.io/jupyter/pytorch-notebook:cuda12") == set()


def test_index_scales():
    idx = a.ImageIndex()
    for i in range(1000):
        idx.update(node(f"n{i}", images=[([f"r.io/img{j}:{i % 3}"], j) for j in range(50)]))
    assert len(idx) == 1000 and len(idx.nodes_with("r.io/img7:1")) == 333


# --- quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw, value", [
    ("500m", Fraction(1, 2)), ("2", 2), ("1.5", Fraction(3, 2)), (".5", Fraction(1, 2)),
    ("4Gi", 4 * 2**30), ("1G", 10**9), ("512Mi", 512 * 2**20), ("1e3", 1000), ("1E-3", Fraction(1, 1000)),
    ("100k", 100_000), (2, 2), (0.1, Fraction(1, 10)), (Fraction(3, 4), Fraction(3, 4)), ("1Ki", 1024),
])
def test_parse_quantity(raw, value):
    assert parse_quantity(raw) == value


@pytest.mark.parametrize("raw", ["", "1Gb", "abc", "1.2.3", True, "1 Gi"])
def test_parse_quantity_rejects(raw):
    with pytest.raises(ValueError):
        parse_quantity(raw)


def test_pod_requests_takes_pod_or_spec():
    p = pod(cpu="500m", memory="1Gi", gpu=1)
    p["spec"]["initContainers"] = [{"resources": {"requests": {"cpu": "2"}}},
                                   {"restartPolicy": "Always", "resources": {"limits": {"memory": "1Gi"}}}]
    p["spec"]["overhead"] = {"cpu": "100m"}
    want = {"cpu": Fraction(21, 10), "memory": 2 * 2**30, "nvidia.com/gpu": 1}
    assert a.pod_requests(p) == want and a.pod_requests(p["spec"]) == want


# --- capacity -----------------------------------------------------------------------------

GPU_REQ = {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1}


def test_placeholders_make_room_but_equal_priority_pods_do_not():
    n = node("g1", cpu="8", memory="32Gi", gpu="1")
    placeholder = pod(cpu="2", memory="8Gi", gpu=1, priority=-10)
    user = pod(cpu="2", memory="8Gi", gpu=1)
    assert a.can_take(n, GPU_REQ, 0, [placeholder])
    assert not a.can_take(n, GPU_REQ, 0, [placeholder], can_preempt=False)  # preemptionPolicy: Never
    assert a.unfit_reason(n, GPU_REQ, 0, [user]) == "insufficient nvidia.com/gpu"
    assert not a.can_take(n, GPU_REQ, -10, [placeholder])  # a placeholder cannot evict another
    assert a.can_take(n, GPU_REQ, 0, [pod(gpu=1, phase="Succeeded")])
    assert a.can_take(n, GPU_REQ, 0, [])
    assert not a.can_take(node("c1"), GPU_REQ, 0, [])  # no GPUs at all


def test_cpu_memory_and_pod_count():
    n = node("c1", cpu="4", memory="16Gi", pods="2")
    assert a.can_take(n, {"cpu": "1500m", "memory": "4Gi"}, 0, [pod(cpu="2500m", memory="12Gi")])
    assert a.unfit_reason(n, {"cpu": "1501m"}, 0, [pod(cpu="2500m")]) == "insufficient cpu"
    assert a.unfit_reason(n, {"memory": "5Gi"}, 0, [pod(memory="12Gi")]) == "insufficient memory"
    assert a.unfit_reason(n, {"cpu": "1"}, 0, [pod(cpu="0"), pod(cpu="0")]) == "too many pods"


def test_node_state_and_taints():
    req = {"cpu": "1"}
    assert a.unfit_reason(node("n", ready=False), req, 0, []) == "not Ready"
    assert not a.can_take(node("n", unschedulable=True), req, 0, [])
    assert a.can_take(node("n", unschedulable=True), req, 0, [],
                      [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    tainted = node("n", taints=[taint])
    assert not a.can_take(tainted, req, 0, [])
    assert a.can_take(tainted, req, 0, [], [{"key": "nvidia.com/gpu", "operator": "Exists",
                                             "effect": "NoSchedule"}])
    assert a.can_take(tainted, req, 0, [], [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}])
    assert not a.can_take(tainted, req, 0, [], [{"key": "nvidia.com/gpu", "value": "other"}])
    no_execute_only = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]
    assert not a.can_take(tainted, req, 0, [], no_execute_only)
    assert a.can_take(tainted, req, 0, [], [{"operator": "Exists"}])
    soft = node("n", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    assert a.can_take(soft, req, 0, [])


def test_node_selector_and_required_terms():
    n = node("g1", labels={"hub.jupyter.org/node-purpose": "user", "gpu-count": "4", "zone": "a"})
    assert a.matches_node(n, {"zone": "a"}, [PURPOSE])
    assert not a.matches_node(n, {"zone": "b"}, None)
    assert not a.matches_node(node("x"), None, [PURPOSE])
    assert a.matches_node(n, None, [])  # KubeSpawner's "no required affinity"

    def one(op, key="gpu-count", values=None):
        e = {"key": key, "operator": op}
        if values is not None:
            e["values"] = values
        return a.matches_node(n, None, [{"matchExpressions": [e]}])

    assert one("Gt", values=["2"]) and not one("Gt", values=["4"]) and one("Lt", values=["5"])
    assert not one("Gt", values=["x"]) and not one("Gt", key="zone", values=["1"])
    assert one("NotIn", values=["3"]) and not one("NotIn", values=["4"]) and one("NotIn", key="nope", values=["1"])
    assert one("Exists") and not one("DoesNotExist") and one("DoesNotExist", key="nope")
    assert a.matches_node(n, None, [{"matchFields": [name_in("g1")]}])
    not_g1 = {"key": "metadata.name", "operator": "NotIn", "values": ["g1"]}
    assert not a.matches_node(n, None, [{"matchFields": [not_g1]}])
    other_field = {"key": "spec.podCIDR", "operator": "In", "values": ["g1"]}
    assert not a.matches_node(n, None, [{"matchFields": [other_field]}])
    assert not a.matches_node(n, None, [{}])  # an empty term matches nothing
    # terms ORed, requirements ANDed
    both = {"matchExpressions": PURPOSE["matchExpressions"] + [{"key": "zone", "operator": "In", "values": ["b"]}]}
    assert not a.matches_node(n, None, [both])
    assert a.matches_node(n, None, [both, {"matchFields": [name_in("g1")]}])
    reason = a.unfit_reason(n, {"cpu": "1"}, 0, [], (), None, [both])
    assert reason == "node selector / required affinity does not match"


def test_candidates_and_fits():
    nodes = {
        "a": node("a", gpu="1", labels={"hub.jupyter.org/node-purpose": "user"}),
        "b": node("b", gpu="1", labels={"hub.jupyter.org/node-purpose": "user"}),
        "c": node("c", gpu="1"),  # wrong purpose: never a candidate
    }
    by_node = {"a": [pod(gpu=1, priority=-10)], "b": [pod(gpu=1)]}
    cands, fits = a.candidates_and_fits(["a", "b", "c", "gone"], nodes, by_node, GPU_REQ, 0,
                                        required_terms=[PURPOSE])
    assert (cands, fits) == (["a", "b"], ["a"])


# --- mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, candidates, fits, used, code, nodes", [
    ("off", ["a"], ["a"], "off", "disabled", ()),
    ("prefer", [], [], "off", "no_holder", ()),
    ("require", [], [], "off", "no_holder", ()),
    ("auto", [], [], "off", "no_holder", ()),
    ("prefer", ["b", "a"], ["b"], "prefer", "configured", ("b", "a")),
    ("require", ["b", "a"], ["b"], "require", "configured", ("b", "a")),
    ("require", ["b", "a"], [], "require", "configured_no_room", ("a", "b")),
    ("auto", ["c", "b", "a"], ["c"], "require", "holder_fits", ("c", "a", "b")),
    ("auto", ["b", "a"], [], "prefer", "no_holder_fits", ("a", "b")),
])
def test_choose_mode(mode, candidates, fits, used, code, nodes):
    d = a.choose_mode(mode, candidates, fits)
    assert (d.mode_used, d.mode, d.code, d.requested, d.nodes) == (used, used, code, mode, nodes)
    assert d.reason


def test_choose_mode_caps_and_rejects_unknown():
    d = a.choose_mode("auto", [f"n{i:03}" for i in range(500)], ["n499"], max_nodes=3)
    assert d.nodes == ("n499", "n000", "n001")
    with pytest.raises(ValueError):
        a.choose_mode("always", [], [])


# --- merging ------------------------------------------------------------------------------


def test_merge_required_without_existing_terms():
    assert a.merge_required([], ["a", "b"]) == [
        {"matchFields": [name_in("a")]},
        {"matchFields": [name_in("b")]},
    ]
    assert a.merge_required(None, ["a"]) == [{"matchFields": [name_in("a")]}]


def test_merge_required_repeats_z2jh_node_purpose():
    existing = [PURPOSE]
    out = a.merge_required(existing, ["a", "b"])
    assert out == [
        {"matchExpressions": PURPOSE["matchExpressions"], "matchFields": [name_in("a")]},
        {"matchExpressions": PURPOSE["matchExpressions"], "matchFields": [name_in("b")]},
    ]
    assert existing == [PURPOSE] and out[0]["matchExpressions"] is not PURPOSE["matchExpressions"]


def test_merge_required_two_existing_terms_ored():
    t1 = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    t2 = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}],
          "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["b"]}]}
    assert a.merge_required([t1, t2], ["a", "b"]) == [
        {"matchExpressions": t1["matchExpressions"], "matchFields": [name_in("a")]},
        {"matchExpressions": t1["matchExpressions"], "matchFields": [name_in("b")]},
        {"matchExpressions": t2["matchExpressions"], "matchFields": t2["matchFields"] + [name_in("a")]},
        # t2 ∧ name=b cannot match (t2 excludes b): left out
    ]


def test_merge_required_edge_cases():
    pinned = {"matchFields": [name_in("x")]}
    assert a.merge_required([pinned], ["a"]) == [pinned]  # nothing combinable: unchanged, never []
    assert a.merge_required([PURPOSE], []) == [PURPOSE]
    assert a.merge_required([PURPOSE, {}], ["a"]) == [
        {"matchExpressions": PURPOSE["matchExpressions"], "matchFields": [name_in("a")]}]
    once = a.merge_required([PURPOSE], ["a", "b"])
    assert a.merge_required(once, ["a", "b"]) == once  # idempotent
    assert len(a.merge_required([], [f"n{i}" for i in range(500)])) == a.MAX_AFFINITY_NODES
    assert a.merge_required([], ["a", "a"]) == [{"matchFields": [name_in("a")]}]


def test_merged_terms_select_exactly_the_nodes_in_the_sim_scheduler():
    """The simulated cluster's scheduler reads the terms the same way."""
    t2 = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    terms = a.merge_required([PURPOSE, t2], ["a", "b"])
    labels = {"a": {"hub.jupyter.org/node-purpose": "user"}, "b": {"zone": "b"}, "c": {"zone": "b"}}
    for name, lab in labels.items():
        sim = any(match_node_selector_term(t, lab, name) for t in terms)
        assert sim == a.matches_node({"metadata": {"name": name, "labels": lab}}, None, terms) == (name != "c")
    # every matchFields requirement carries one value, as the apiserver demands
    assert all(len(f["values"]) == 1 for t in terms for f in t.get("matchFields", []))


def test_merge_preferred():
    keep = {"weight": 10, "preference": PURPOSE}
    out = a.merge_preferred([keep], ["a", "b"], weight=50)
    assert out == [
        keep,
        {"weight": 50, "preference": {"matchFields": [name_in("a")]}},
        {"weight": 50, "preference": {"matchFields": [name_in("b")]}},
    ]
    assert a.merge_preferred(out, ["a", "b"], weight=50) == out  # idempotent
    assert a.merge_preferred(None, ["a"]) == [{"weight": 100, "preference": {"matchFields": [name_in("a")]}}]
    assert len(a.merge_preferred([], [f"n{i}" for i in range(500)], max_nodes=7)) == 7
    for bad in (0, 101):
        with pytest.raises(ValueError):
            a.merge_preferred([], ["a"], weight=bad)


def test_apply():
    req = a.choose_mode("auto", ["a"], ["a"])
    assert a.apply(req, [PURPOSE], []) == (
        [{"matchExpressions": PURPOSE["matchExpressions"], "matchFields": [name_in("a")]}], [])
    pref = a.choose_mode("auto", ["a"], [])
    assert a.apply(pref, [PURPOSE], None, weight=80) == (
        [PURPOSE], [{"weight": 80, "preference": {"matchFields": [name_in("a")]}}])
    assert a.apply(a.choose_mode("off", ["a"], ["a"]), [PURPOSE], []) == ([PURPOSE], [])
