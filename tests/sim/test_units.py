"""Unit tests of the simulator's small parts: scenario files, image names, GPUs."""

from __future__ import annotations

import configparser
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim.api.imagerefs import normalize
from gpu_reclaim_sim.gpu.gpus import GpuFleet
from gpu_reclaim_sim.kubelet.images import ImageRegistry, repo_digest
from gpu_reclaim_sim.paths import DEFAULT_SCENARIO, DEMO_CONFIG, PACKAGE, REPO, SCENARIOS


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
