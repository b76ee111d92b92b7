"""The simulator's own Kubernetes semantics (gpu_reclaim_sim/api/) against the examples and
rules of Kubernetes' documentation, quoted in each test: the product under test is checked
against these, so they must not be the product's (tests/architecture/test_sim_layout.py)."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest

from gpu_reclaim_sim.api.imagerefs import normalize
from gpu_reclaim_sim.api.nodeaffinity import match_node_selector_term
from gpu_reclaim_sim.api.quantity import is_valid, parse
from gpu_reclaim_sim.api.requests import pod_requests
from gpu_reclaim_sim.api.taints import TAINT_UNSCHEDULABLE, tolerates
from gpu_reclaim_sim.api.timestamps import parse_time, rfc3339

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


# --- quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("1.5", Fraction(3, 2)), ("1500m", Fraction(3, 2)),  # "1.5 will be serialized as 1500m"
    ("1.5Gi", 1536 * 2**20), ("1536Mi", 1536 * 2**20),  # "1.5Gi will be serialized as 1536Mi"
    ("1Ki", 1024), ("1k", 1000),  # "Note that 1024 = 1Ki but 1000 = 1k"
    ("5.", 5), (".5", Fraction(1, 2)), ("+2", 2), ("-2", -2),  # <number>, <signedNumber>
    ("1e3", 1000), ("1E3", 1000), ("1e-3", Fraction(1, 1000)), ("2E", 2 * 10**18),
    ("1Ei", 2**60), ("3P", 3 * 10**15), ("0", 0), ("", None), ("1.5.5", None), ("Gi", None),
    ("1KI", None), ("1 Gi", None), ("1mi", None), (".", None), ("1e", None), ("1e1.5", None),
])
def test_quantities_follow_the_serialization_format(text, value):
    """<quantity> ::= <signedNumber><suffix>; <number> ::= <digits> | <digits>.<digits> |
    <digits>. | .<digits>; <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei; <decimalSI> ::= m |
    "" | k | M | G | T | P | E; <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
    (the Quantity reference, with its examples "1.5 will be serialized as 1500m" and "1.5Gi
    will be serialized as 1536Mi")."""
    if value is None:
        assert not is_valid(text)
        with pytest.raises(ValueError):
            parse(text)
    else:
        assert is_valid(text)
        assert parse(text) == value


def test_quantities_are_capped_and_rounded_up_to_thousandths():
    """"No quantity may represent a number greater than 2^63-1 in magnitude, nor may it have
    more than 3 decimal places. Numbers larger or more precise will be capped or rounded up.
    (E.g.: 0.1m will rounded up to 1m.)\""""
    assert parse("0.1m") == parse("1m") == Fraction(1, 1000)
    assert parse("1e30") == 2**63 - 1
    assert parse("-0.1m") == Fraction(-1, 1000)


def test_json_numbers_are_quantities_read_from_their_text():
    """A manifest's `cpu: 2` or `cpu: 0.5` is a JSON number; the API reads its text."""
    assert parse(2) == 2 and parse(0.5) == Fraction(1, 2) and parse(0.1) == Fraction(1, 10)
    assert not is_valid(True) and not is_valid(None) and not is_valid(float("nan")) and not is_valid([1])


# --- taints and tolerations -----------------------------------------------------------------


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),  # "Defaults to Equal"
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),  # wildcard for value
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent", "effect": "NoSchedule"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),  # empty effect: all effects
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"operator": "Exists"}, True),  # empty key with Exists: every taint
    ({"operator": "Equal", "value": "present"}, False),  # an empty key needs Exists
    ({"key": "other", "operator": "Exists"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Gt", "value": "1"}, False),  # behind an alpha gate
])
def test_a_toleration_matches_the_key_value_effect_triple(toleration, tolerated):
    """"The pod this Toleration is attached to tolerates any taint that matches the triple
    <key,value,effect> using the matching operator <operator>." effect: "Empty means match
    all taint effects." key: "Empty means match all taint keys. If the key is empty,
    operator must be Exists; this combination means to match all values and all keys."
    operator: "Defaults to Equal. Exists is equivalent to wildcard for value\""""
    assert tolerates(toleration, GPU_TAINT) is tolerated


def test_the_docs_two_tolerations_match_the_kubectl_taint_example():
    """`kubectl taint nodes node1 key1=value1:NoSchedule`; "you can specify a toleration
    for a pod in the PodSpec. Both of the following tolerations 'match' the taint created
    by the kubectl taint line above" (Taints and Tolerations)."""
    taint = {"key": "key1", "value": "value1", "effect": "NoSchedule"}
    assert tolerates({"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}, taint)
    assert tolerates({"key": "key1", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert tolerates({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, TAINT_UNSCHEDULABLE)


# --- node affinity ----------------------------------------------------------------------------

NODE = {"topology.kubernetes.io/zone": "antarctica-east1", "another-node-label-key": "another-node-label-value",
        "gpu-count": "4"}


def expr(key, operator, *values):
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize("term, matches", [
    ({"matchExpressions": [expr("topology.kubernetes.io/zone", "In", "antarctica-east1", "antarctica-west1")]}, True),
    ({"matchExpressions": [expr("topology.kubernetes.io/zone", "In", "antarctica-west1")]}, False),
    ({"matchExpressions": [expr("topology.kubernetes.io/zone", "NotIn", "antarctica-west1")]}, True),
    ({"matchExpressions": [expr("missing", "NotIn", "x")]}, True),  # anti-affinity: no label matches
    ({"matchExpressions": [expr("gpu-count", "Exists")]}, True),
    ({"matchExpressions": [expr("missing", "DoesNotExist")]}, True),
    ({"matchExpressions": [expr("gpu-count", "DoesNotExist")]}, False),
    ({"matchExpressions": [expr("gpu-count", "Gt", "3")]}, True),
    ({"matchExpressions": [expr("gpu-count", "Gt", "4")]}, False),
    ({"matchExpressions": [expr("gpu-count", "Lt", "5")]}, True),
    ({"matchExpressions": [expr("gpu-count", "Lt", "x")]}, False),  # not an integer
    ({"matchExpressions": [expr("topology.kubernetes.io/zone", "Gt", "1")]}, False),
    ({"matchExpressions": [expr("gpu-count", "Exists"), expr("missing", "Exists")]}, False),  # ANDed
    ({"matchFields": [expr("metadata.name", "In", "node-1")]}, True),
    ({"matchFields": [expr("metadata.name", "NotIn", "node-1")]}, False),
    ({"matchExpressions": [expr("gpu-count", "Exists")], "matchFields": [expr("metadata.name", "In", "node-2")]}, False),
    ({}, False), ({"matchExpressions": []}, False),  # "A null or empty node selector term matches no objects"
])
def test_node_selector_terms(term, matches):
    """"If you specify multiple expressions in a single matchExpressions field ... the Pod
    can be scheduled onto a node only if all the expressions are satisfied (expressions are
    ANDed)"; operators In, NotIn, Exists, DoesNotExist, Gt and Lt ("NotIn and DoesNotExist
    ... to define node anti-affinity behavior"; Gt/Lt: "the values array must have a single
    element, which will be interpreted as an integer"); "A null or empty node selector term
    matches no objects" (Assigning Pods to Nodes; NodeSelectorRequirement, NodeSelectorTerm)."""
    assert match_node_selector_term(term, NODE, "node-1") is matches


# --- effective requests ------------------------------------------------------------------------


def container(name, cpu=None, memory=None, **extra):
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": "busybox", "resources": {"requests": requests}, **extra}


def test_the_highest_init_request_against_the_sum_of_the_app_containers():
    """"The highest of any particular resource request or limit defined on all init
    containers is the effective init request/limit"; "The Pod's effective request/limit for a
    resource is the higher of: the sum of all app containers request/limit for a resource;
    the effective init request/limit for a resource" (Init Containers, Resource sharing)."""
    pod = {"spec": {"initContainers": [container("config-generator", "250m", "256Mi"),
                                       container("mysql-checker", "500m", "1Gi")],
                    "containers": [container("app", "500m", "1Gi"), container("log-aggregator", "250m", "1Gi")]}}
    assert pod_requests(pod) == {"cpu": Fraction(3, 4), "memory": 2 * 2**30}
    pod["spec"]["initContainers"].append(container("migrate", "2", "512Mi"))
    assert pod_requests(pod) == {"cpu": 2, "memory": 2 * 2**30}


def test_sidecars_run_beside_later_init_containers_and_the_app_containers():
    """"For each init container, take its request/limit for the resource and add the
    requests/limits of all sidecar containers that are listed before it"; after
    initialization the app containers and the sidecars run together (Effective Pod requests
    and limits; a sidecar is an init container with `restartPolicy: Always`)."""
    pod = {"spec": {"initContainers": [container("setup-before", "3"),
                                       container("proxy", "500m", restartPolicy="Always"),
                                       container("setup", "1200m")],
                    "containers": [container("app", "1")]}}
    # init: max(3, 0.5, 1.2 + 0.5) = 3; running: 1 + 0.5 = 1.5
    assert pod_requests(pod)["cpu"] == 3
    pod["spec"]["initContainers"][0] = container("setup-before", "1")
    assert pod_requests(pod)["cpu"] == Fraction(17, 10)  # 1.2 + the sidecar's 0.5 > 1.5


def test_pod_overhead_is_added_to_the_requests():
    """"A pod's overhead is considered in addition to the sum of container resource
    requests when scheduling a Pod" — the doc's kata-fc RuntimeClass (120Mi, 250m) with
    two containers limited to 500m/100Mi and 1500m/100Mi (their requests default to their
    limits): "2.25 CPU and 320 MiB of memory" (Pod Overhead, Usage example)."""
    pod = {"spec": {"containers": [container("busybox-ctr", "500m", "100Mi"), container("nginx-ctr", "1500m", "100Mi")],
                    "overhead": {"memory": "120Mi", "cpu": "250m"}}}
    assert pod_requests(pod) == {"cpu": Fraction(9, 4), "memory": 320 * 2**20}


def test_the_schedulers_defaults_for_a_container_that_requests_nothing():
    """kube-scheduler scores a container with no cpu or memory request as 100m and 200Mi."""
    defaults = {"cpu": Fraction(1, 10), "memory": Fraction(200 * 2**20)}
    pod = {"spec": {"containers": [container("a"), container("b", cpu="1")]}}
    assert pod_requests(pod, non_missing=defaults) == {"cpu": Fraction(11, 10), "memory": 400 * 2**20}
    assert pod_requests(pod) == {"cpu": 1}


# --- image names --------------------------------------------------------------------------------

D = "sha256:" + "0" * 64


@pytest.mark.parametrize("ref, full", [
    ("pause", "docker.io/library/pause:latest"),  # "a name such as pause, example/mycontainer"
    ("example/mycontainer", "docker.io/example/mycontainer:latest"),
    ("kube-apiserver", "docker.io/library/kube-apiserver:latest"),
    ("fictional.registry.example/imagename", "fictional.registry.example/imagename:latest"),
    ("fictional.registry.example:10443/imagename", "fictional.registry.example:10443/imagename:latest"),
    ("nginx", "docker.io/library/nginx:latest"),  # Docker: nginx is docker.io/library/nginx:latest
    ("docker/welcome-to-docker", "docker.io/docker/welcome-to-docker:latest"),
    ("ghcr.io/dockersamples/example-voting-app-vote:pr-311", "ghcr.io/dockersamples/example-voting-app-vote:pr-311"),
    ("index.docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    ("localhost/x", "localhost/x:latest"), ("registry:5000/team/x:1.0", "registry:5000/team/x:1.0"),
    ("Upper/x", "docker.io/Upper/x:latest"),  # no dot, colon or localhost: a namespace, not a host
    (f"registry.k8s.io/pause@{D}", f"registry.k8s.io/pause@{D}"),
    (f"ubuntu:22.04@{D}", f"docker.io/library/ubuntu@{D}"),  # the digest is the image
])
def test_image_names(ref, full):
    """"If you don't specify a registry hostname, Kubernetes assumes that you mean the Docker
    public registry"; "If you don't specify a tag, Kubernetes assumes you mean the tag
    latest"; "Digests are a unique identifier for a specific version of an image" (Images,
    Image names); Docker: "When the namespace is not present, Docker uses library as the
    default namespace" and `nginx` is `docker.io/library/nginx:latest`."""
    assert normalize(ref) == full
    assert normalize(full) == full


# --- times ----------------------------------------------------------------------------------------


def test_times_are_rfc3339_in_utc():
    """ObjectMeta's creationTimestamp: "It is represented in RFC3339 form and is in UTC";
    `metav1.Time` is written to the second, MicroTime (an Event's eventTime) with
    microseconds."""
    t = dt.datetime(2026, 12, 4, 23, 0, 0, 123456, tzinfo=dt.timezone.utc)
    assert rfc3339(t) == "2026-12-04T23:00:00Z"
    assert rfc3339(t.astimezone(dt.timezone(dt.timedelta(hours=2)))) == "2026-12-04T23:00:00Z"
    assert parse_time("2026-12-04T23:00:00Z") == t.replace(microsecond=0)
    assert parse_time("2026-12-04T23:00:00.123456Z") == t
    assert parse_time("2026-12-05T01:00:00+02:00") == t.replace(microsecond=0)
    assert parse_time(None) is None and parse_time("") is None
    for bad in ("yesterday", "2026-12-04", "2026-12-04T23:00Z", 5):
        with pytest.raises(ValueError):
            parse_time(bad)
