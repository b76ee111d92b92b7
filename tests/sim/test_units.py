"""Unit tests of the simulator's small parts: scenario files, image names, GPUs."""

from __future__ import annotations

import configparser
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim.gpus import GpuFleet
from gpu_reclaim_sim.images import ImageRegistry, repo_digest
from gpu_reclaim_sim.paths import DEFAULT_SCENARIO, DEMO_CONFIG, PACKAGE, REPO, SCENARIOS
from jupyterhub_gpu_reclaim.spawner.images import normalize


def test_example_scenarios_load():
    for path in sorted(SCENARIOS.glob("*.yaml")):
        s = sc.load(path)
        assert s.node_groups, path
    demo = sc.load(DEFAULT_SCENARIO)
    assert [(g.name, g.count, g.gpus) for g in demo.node_groups] == [("gpu", 2, 2), ("cpu", 1, 0)]


def test_scenarios_and_the_demo_config_are_package_data():
    """What the simulator and the demo read at run time travels in the wheel (setup.cfg's
    package_data), so an installed package runs them without the clone."""
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    patterns = [p.strip() for p in setup["options.package_data"][PACKAGE.name].split(",")]
    shipped = {path for pattern in patterns for path in PACKAGE.glob(pattern) if path.is_file()}
    needed = {p for folder in (SCENARIOS, DEMO_CONFIG) for p in folder.iterdir() if p.is_file()}
    assert DEFAULT_SCENARIO in needed and DEMO_CONFIG / "jupyterhub_config.py" in needed
    assert needed <= shipped


@pytest.mark.parametrize("data, message", [
    ({}, "nodeGroups"),
    ({"nodeGroups": [{"name": "gpu", "gpuz": 2}]}, "nodeGroups/0: Additional properties are not allowed ('gpuz'"),
    ({"nodeGroups": [{"name": "Bad_Name"}]}, "nodeGroups/0/name"),
    ({"nodeGroups": [{"name": "a"}, {"name": "a"}]}, "group names must be unique"),
    ({"nodeGroups": [{"name": "a", "bandwidth": "fast"}]}, "nodeGroups[0].bandwidth: cannot read 'fast'"),
    ({"nodeGroups": [{"name": "a", "autoscaler": {"min": 3, "max": 1}}]}, "max (1) is below min (3)"),
    ({"nodeGroups": [{"name": "a"}], "placeholders": [{"name": "p", "count": 1, "priorityClassName": "x"}]},
     "'x' is not in priorityClasses"),
    ([1, 2], "a scenario is a mapping"),
    ({"nodeGroups": [{"name": "a"}], "podNetwork": "10.0.0.0/16"}, "must be a network inside 127.0.0.0/8"),
    ({"nodeGroups": [{"name": "a"}], "podNetwork": "127.1.2.3/16"}, "podNetwork: 127.1.2.3/16 has host bits set"),
    # an IPv6 network is refused with the same sentence (it was a TypeError comparing versions)
    ({"nodeGroups": [{"name": "a"}], "podNetwork": "::1/128"}, "must be a network inside 127.0.0.0/8"),
    ({"nodeGroups": [{"name": "a"}], "serviceNetwork": "fd00::/112"}, "must be a network inside 127.0.0.0/8"),
    ({"nodeGroups": [{"name": "a"}], "gpu": {"exporterVersion": "4.8.2"}},
     "gpu.exporterVersion: '4.8.2' is not a dcgm-exporter release tag such as 4.5.3-4.8.2"),
])
def test_bad_scenarios_get_clear_errors(data, message):
    with pytest.raises(sc.ScenarioError) as e:
        sc.from_dict(data, "s.yaml")
    assert message in str(e.value)
    assert str(e.value).startswith("s.yaml")


def test_scenario_file_errors(tmp_path):
    with pytest.raises(sc.ScenarioError, match="cannot read the scenario file"):
        sc.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodeGroups: [\n")
    with pytest.raises(sc.ScenarioError, match="not valid YAML"):
        sc.load(bad)


@pytest.mark.parametrize("text, value", [("5GB", 5 * 10**9), ("1.5GiB", int(1.5 * 2**30)), ("512Mi", 512 * 2**20), (1000, 1000)])
def test_sizes(text, value):
    assert sc.parse_size(text) == value


@pytest.mark.parametrize("ref, full", [
    ("ubuntu", "docker.io/library/ubuntu:latest"),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("jupyter/base-notebook", "docker.io/jupyter/base-notebook:latest"),
    ("docker.io/library/ubuntu", "docker.io/library/ubuntu:latest"),
    ("quay.io/jupyter/minimal-notebook:2025-06-02", "quay.io/jupyter/minimal-notebook:2025-06-02"),
    ("localhost:5000/x", "localhost:5000/x:latest"),
    ("quay.io/a/b@sha256:0123", "quay.io/a/b@sha256:0123"),
])
def test_image_names_normalised_like_the_runtime(ref, full):
    assert normalize(ref) == full


def test_image_registry_status_entry():
    s = sc.load(DEFAULT_SCENARIO)
    reg = ImageRegistry(s)
    entry = reg.status_entry("quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02")
    assert entry["sizeBytes"] == 5 * 10**9
    assert entry["names"][1] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02"
    assert entry["names"][0].startswith("quay.io/jupyter/pytorch-notebook@sha256:")
    assert repo_digest("ubuntu") == repo_digest("docker.io/library/ubuntu:latest")
    assert reg.size("unknown/image") == s.default_image_size


def _fleet() -> GpuFleet:
    s = sc.from_dict({"nodeGroups": [{"name": "gpu", "gpus": 2}], "gpu": {"idleEngineActive": 0.003}})
    fleet = GpuFleet(s)
    fleet.add_node("gpu-1", 2, "NVIDIA A100-SXM4-40GB", 40960)
    return fleet


def _samples(fleet: GpuFleet) -> dict:
    out = {}
    for family in text_string_to_metric_families(fleet.metrics().decode()):
        for sample in family.samples:
            out[(sample.name, sample.labels["gpu"])] = sample
    return out


def test_dcgm_metrics_follow_allocation_and_load():
    fleet = _fleet()
    [gpu] = fleet.allocate("gpu-1", "jhub", "jupyter-alice", "notebook", 1)
    fleet.sample()
    s = _samples(fleet)
    util = s[("DCGM_FI_DEV_GPU_UTIL", "0")]
    assert util.value == 0
    assert util.labels["pod"] == "jupyter-alice" and util.labels["namespace"] == "jhub"
    assert util.labels["container"] == "notebook" and util.labels["UUID"] == gpu.uuid
    assert util.labels["Hostname"] == "gpu-1" and util.labels["modelName"] == "NVIDIA A100-SXM4-40GB"
    # the idle noise floor of the profiling metric: never exactly 0
    assert s[("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0")].value == pytest.approx(0.003)
    free = s[("DCGM_FI_DEV_GPU_UTIL", "1")].labels
    assert "pod" not in free and "pod_uid" not in util.labels  # the current exporter (4.5.3-4.8.2)
    assert util.labels["pci_bus_id"] == "00000000:18:00.0" and free["pci_bus_id"] == "00000000:28:00.0"

    fleet.set_load("jhub", "jupyter-alice", 95, seconds=0.2, memory_mib=8000)
    s = _samples(fleet)
    assert s[("DCGM_FI_DEV_GPU_UTIL", "0")].value == 95
    assert s[("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0")].value == pytest.approx(0.95)
    assert s[("DCGM_FI_DEV_FB_USED", "0")].value == 8000
    time.sleep(0.25)
    fleet.sample()
    s = _samples(fleet)
    assert s[("DCGM_FI_DEV_GPU_UTIL", "0")].value == 0
    assert s[("DCGM_FI_DEV_FB_USED", "0")].value == 8000  # memory stays held, like a PyTorch cache

    fleet.release("jhub", "jupyter-alice")
    fleet.sample()
    assert "pod" not in _samples(fleet)[("DCGM_FI_DEV_GPU_UTIL", "0")].labels


@pytest.mark.parametrize("version,empty_pods,bus_id", [
    ("3.3.3-3.3.1", True, False), ("3.3.5-3.4.0", False, False), ("3.3.7-3.5.0", False, True)])
def test_dcgm_metrics_of_older_exporters(version, empty_pods, bus_id):
    """A scenario's gpu.exporterVersion: free GPUs carry empty pod labels up to 3.3.3-3.3.1;
    pci_bus_id from 3.3.7-3.5.0; pod_uid with gpu.podUid (--kubernetes-enable-pod-uid)."""
    s = sc.from_dict({"nodeGroups": [{"name": "gpu", "gpus": 2}], "gpu": {"exporterVersion": version, "podUid": True}})
    fleet = GpuFleet(s)
    fleet.add_node("gpu-1", 2, "NVIDIA A100-SXM4-40GB", 40960)
    fleet.allocate("gpu-1", "jhub", "jupyter-alice", "notebook", 1, uid="u-1")
    held, free = (_samples(fleet)[("DCGM_FI_DEV_GPU_UTIL", g)].labels for g in ("0", "1"))
    assert held["pod_uid"] == "u-1"
    assert (free.get("pod") == "" and free.get("namespace") == "") == empty_pods and ("pod" in free) == empty_pods
    assert ("pci_bus_id" in held) == bus_id


def test_gpu_load_refuses_bad_values():
    fleet = _fleet()
    with pytest.raises(KeyError):
        fleet.set_load("jhub", "nobody", 50, 10)
    fleet.allocate("gpu-1", "jhub", "p", "c", 2)
    for args in ((150, 10), (-1, 10), (50, -5)):
        with pytest.raises(ValueError):
            fleet.set_load("jhub", "p", *args)
    with pytest.raises(ValueError):
        fleet.set_load("jhub", "p", 50, 10, memory_mib=10**6)
    with pytest.raises(RuntimeError, match="1 GPU\\(s\\) asked, 0 free"):
        fleet.allocate("gpu-1", "jhub", "q", "c", 1)


def test_events_expire_after_their_ttl():
    from gpu_reclaim_sim.events import EventRecorder
    from gpu_reclaim_sim.resources import BY_KIND
    from gpu_reclaim_sim.store import Store

    store = Store()
    store.create(BY_KIND["Namespace"], {"metadata": {"name": "jhub"}})
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "jhub", "uid": "u1"}}
    events = EventRecorder(store)
    old = events.record(pod, "Pulling", 'Pulling image "x"', component="kubelet")
    store.update(BY_KIND["Event"], "jhub", old["metadata"]["name"],
                 lambda e: e.__setitem__("lastTimestamp", "2020-01-01T00:00:00Z"))
    fresh = events.record(pod, "Started", "Started container notebook", component="kubelet")
    assert events.expire(3600) == 1
    assert [e["metadata"]["name"] for e in store.objects(BY_KIND["Event"])] == [fresh["metadata"]["name"]]
    # a repeat of the expired event is a new event, not a bump of the gone one
    again = events.record(pod, "Pulling", 'Pulling image "x"', component="kubelet")
    assert again["count"] == 1


def test_crc32_of_concatenated_pieces():
    import random
    import zlib

    from gpu_reclaim_sim.compression import crc32_combine, crc32_shift

    rng = random.Random(1)
    for a, b in [(b"", b""), (b"abc", b""), (b"", b"xyz"), (rng.randbytes(70_001), rng.randbytes(123_457))]:
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), crc32_shift(len(b))) == zlib.crc32(a + b)


async def test_a_list_after_a_change_recompresses_only_the_runs_that_hold_it(monkeypatch):
    """A list's items stay compressed in runs between lists: after one object changed,
    its run and the next (whose dictionary it is) are compressed again, nothing else; and
    whatever changed, the gzip stream decodes to the plain list."""
    import gzip
    import json
    import random

    from gpu_reclaim_sim import compression

    head = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":['
    compressed = []  # the runs of items compressed
    original = compression.Deflated.of.__func__

    def counted(cls, data, zdict=None):
        if data != head:
            compressed.append(data)
        return original(cls, data, zdict)

    monkeypatch.setattr(compression.Deflated, "of", classmethod(counted))
    rng = random.Random(2)
    names = [f"pod-{i}" for i in range(2000)]
    items = [json.dumps({"metadata": {"name": n, "uid": rng.randbytes(8).hex()}, "spec": {"x": "y" * 50}}).encode()
             for n in names]
    lists = compression.ListCompressor()

    async def check() -> None:
        body = b"".join(compression.gzip_pieces(head, await lists.items(names, items)))
        assert gzip.decompress(body) == head + b",".join(items) + b"]}"

    await check()
    runs = len(compressed)
    assert 2000 / 64 < runs < 2000 / 16  # ~32 items a run
    compressed.clear()
    await check()
    assert compressed == []  # nothing changed: nothing compressed
    items[1000] = items[1000].replace(b'"y', b'"z')
    await check()
    assert 1 <= len(compressed) <= 2 and any(items[1000] in data for data in compressed)
    compressed.clear()
    del names[500], items[500]
    names.insert(1500, "new"), items.insert(1500, b'{"metadata":{"name":"new"}}')
    names.append("last"), items.append(b'{"metadata":{"name":"last"}}')
    await check()
    assert 3 <= len(compressed) <= 6
    names.clear(), items.clear()
    await check()


def test_which_requests_ask_for_gzip():
    from gpu_reclaim_sim.compression import accepts_gzip

    # as the apiserver's ContentEncodingSupported: a comma-separated token exactly "gzip"
    assert accepts_gzip("gzip") and accepts_gzip("gzip, deflate") and accepts_gzip("br , gzip ")
    assert not any(accepts_gzip(v) for v in ("", "identity", "deflate", "gzip;q=1.0", "GZIP", "x-gzip"))


def test_the_fast_schema_check_agrees_with_jsonschema():
    """`openapi.valid` spares admission jsonschema's cost for a valid object; it may never
    call valid what jsonschema refuses. Checked on pods and on mutations of them: types
    swapped, fields dropped, unknown fields added."""
    import copy
    import random

    from gpu_reclaim_sim import openapi

    def agree(obj):
        fast = openapi.valid("v1", "Pod", obj)
        assert fast == (not any(True for _ in openapi.errors("v1", "Pod", obj))), obj
        return fast

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 8888}],
                                    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}},
                                    "livenessProbe": {"httpGet": {"port": "http"}}}],
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                    "securityContext": {"runAsUser": 1000, "fsGroup": 100}}}
    assert agree(pod)
    bad = [("spec", "containers", 0, "ports", 0, "containerPort", True),  # a boolean is no integer
           ("spec", "containers", 0, "livenessProbe", "httpGet", "port", None),  # IntOrString: not null
           ("spec", "securityContext", "runAsUser", "1000"),
           ("spec", "containers", 0, "unknownField", 1),
           ("metadata", "labels", {"a": ["b"]})]
    for *path, value in bad:
        obj = copy.deepcopy(pod)
        target = obj
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        assert not agree(obj), path
    rng = random.Random(5)
    values = [None, 1, 2.0, 2.5, True, "s", [], {}, ["x"], {"a": 1}]

    def paths(v, prefix=()):
        yield prefix
        children = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in children:
            yield from paths(x, prefix + (k,))

    for _ in range(300):
        obj = copy.deepcopy(pod)
        *path, last = rng.choice(list(paths(obj))[1:])
        target = obj
        for key in path:
            target = target[key]
        if isinstance(target, dict) and rng.random() < 0.2:
            target[f"x{rng.randint(0, 9)}"] = copy.deepcopy(rng.choice(values))
        elif rng.random() < 0.2:
            del target[last]
        else:
            target[last] = copy.deepcopy(rng.choice(values))
        agree(obj)
