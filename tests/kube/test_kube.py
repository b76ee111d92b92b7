"""Kubernetes API semantics the spawner and the pods signal share (signals/kube.py)."""

from fractions import Fraction

import pytest

from jupyterhub_gpu_reclaim.signals import kube


@pytest.mark.parametrize("text, value", [
    ("500m", Fraction(1, 2)), ("2", 2), ("4Gi", 4 * 2**30), ("1G", 10**9), ("1e3", 1000),
    (".5", Fraction(1, 2)), (".", 0), ("+", 0), ("0.1n", Fraction(1, 10**9)), (" 1Mi ", 2**20),
])
def test_quantities_as_the_apiserver_reads_them(text, value):
    assert kube.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1K", "1e", "1m3", "1.2.3", "1 Gi", "", "1e1.5"])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        kube.parse_quantity(text)


@pytest.mark.parametrize("label, op, value, matches", [
    ("10", "Gt", "5", True), ("08", "Gt", "5", True), ("-3", "Lt", "0", True),
    ("1_000", "Gt", "5", False),  # Go's ParseInt: digits only
    (" 5", "Lt", "9", False),
    ("9223372036854775808", "Gt", "0", False),  # beyond int64
])
def test_gt_lt_parse_integers_like_go(label, op, value, matches):
    expr = {"key": "k", "operator": op, "values": [value]}
    assert kube.match_expression(expr, {"k": label}) is matches


def test_match_fields_take_one_value():
    one = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    two = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
    assert kube.match_node_selector_term(one, {}, "a")
    assert not kube.match_node_selector_term(two, {}, "a")  # the apiserver rejects it; matches nothing


def test_pod_requests_count_sidecars_and_init_containers():
    spec = {
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
        ],
        "containers": [{"name": "notebook", "resources": {"requests": {"cpu": "500m"},
                                                          "limits": {"nvidia.com/gpu": "1"}}}],
    }
    requests = kube.pod_requests({"spec": spec})
    # max(sidecar + notebook, sidecar + setup) = 3 CPUs; a GPU limit is its request
    assert requests["cpu"] == 3 and requests["nvidia.com/gpu"] == 1
