"""MIG and time-sliced GPUs in the simulated cluster: what the nodes advertise, what the
kubelet hands a pod, and what dcgm-exporter publishes for it, read back through the
product's own exporter parser (signals.dcgm). The cluster runs in process, stub mode."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim.gpu.gpus import GpuFleet
from gpu_reclaim_sim.kubelet.nodes import node_manifest
from gpu_reclaim_sim.paths import SCENARIOS
from jupyterhub_gpu_reclaim.signals.dcgm import parse_dcgm_text
from jupyterhub_gpu_reclaim.signals.pods import pod_info

NS = "jhub"
IMAGE = "quay.io/jupyter/base-notebook:2025-06-02"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
MIG = {"name": "mig", "gpus": 1, "gpuModel": "NVIDIA A100-SXM4-80GB", "gpuMemory": "80GiB",
       "mig": {"profile": "1g.10gb"}, "images": [IMAGE]}
SLICED = {"name": "sliced", "gpus": 1, "gpuModel": "Tesla T4", "gpuMemory": "16GiB",
          "timeSlicing": {"replicas": 4}, "images": [IMAGE]}


def scenario(*groups: dict, **gpu: Any) -> sc.Scenario:
    return sc.from_dict({"mode": "stub", "namespaces": [NS], "nodeGroups": list(groups),
                         "gpu": {"collectionInterval": 3600, **gpu}})


def gpu_pod(name: str, resource: str, count: int = 1) -> dict:
    """A pod asking for `count` of `resource` (requests as admission defaults them: the limits)."""
    amount = {resource: str(count)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "notebook", "image": IMAGE,
                                     "resources": {"limits": amount, "requests": dict(amount)}}]}}


def series(text: bytes) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text.decode()) for s in f.samples]


# --- scenarios ---------------------------------------------------------------------------


def test_a_scenario_declares_mig_or_time_slicing_per_node_group():
    s = scenario(MIG, SLICED, {"name": "mig3", "gpus": 2, "mig": {"profile": "3g.40gb"}},
                 {"name": "renamed", "gpus": 2, "timeSlicing": {"replicas": 2, "renameByDefault": True}})
    mig, sliced, mig3, renamed = (g.sharing for g in s.node_groups)
    assert (mig.resource, mig.devices(1)) == ("nvidia.com/mig-1g.10gb", 7)
    assert (mig3.resource, mig3.devices(2)) == ("nvidia.com/mig-3g.40gb", 4)  # 2 per GPU
    assert (sliced.resource, sliced.devices(1), sliced.time_sliced) == ("nvidia.com/gpu", 4, True)
    assert (renamed.resource, renamed.devices(2)) == ("nvidia.com/gpu.shared", 4)
    with pytest.raises(sc.ScenarioError, match="need 8 of a GPU's 7"):
        scenario({"name": "g", "gpus": 1, "mig": {"profile": "2g.20gb", "perGpu": 4}})
    with pytest.raises(sc.ScenarioError, match="together"):
        scenario({"name": "g", "gpus": 1, "mig": {"profile": "1g.10gb"}, "timeSlicing": {"replicas": 2}})
    with pytest.raises(sc.ScenarioError, match="profile"):
        scenario({"name": "g", "gpus": 1, "mig": {"profile": "one-tenth"}})


def test_the_shared_gpus_example_scenario_has_a_mig_and_a_time_sliced_node():
    s = sc.load(SCENARIOS / "shared-gpus.yaml")
    mig, sliced = s.node_groups[0].sharing, s.node_groups[1].sharing
    assert (mig.resource, mig.devices(1)) == ("nvidia.com/mig-1g.10gb", 7)
    assert (sliced.resource, sliced.devices(1)) == ("nvidia.com/gpu.shared", 4) and s.gpu_virtual_gpus


# --- the exporter, device by device ------------------------------------------------------


def test_mig_instances_report_engine_activity_per_instance_and_no_gpu_util():
    s = scenario(MIG)
    fleet = GpuFleet(s)
    fleet.add_node("mig-1", 1, "NVIDIA A100-SXM4-80GB", 81920, s.node_groups[0].sharing)
    [a] = fleet.allocate("mig-1", NS, "jupyter-a", "notebook", 1)
    [b] = fleet.allocate("mig-1", NS, "jupyter-b", "notebook", 1)
    assert a.uuid.startswith("MIG-") and a.uuid != b.uuid and a.memory_mib == 10240
    fleet.set_load(NS, "jupyter-a", 80, seconds=60)
    got = series(fleet.metrics())
    assert {name for name, _, _ in got} == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"}
    engine = {lab["GPU_I_ID"]: (lab, v) for name, lab, v in got if name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    assert len(engine) == 7  # every instance, held or not
    labels, value = engine[str(a.instance)]
    assert labels["GPU_I_PROFILE"] == "1g.10gb" and labels["pod"] == "jupyter-a" and value == pytest.approx(0.8)
    assert labels["UUID"] == a.gpu.uuid  # the parent GPU's
    assert engine[str(b.instance)][1] == pytest.approx(s.gpu_idle_engine_active)  # b's own instance: idle
    # the product reads each instance as that pod's GPU, in percent
    readings = parse_dcgm_text(fleet.metrics().decode(), NOW)
    ra, rb = readings[(NS, "jupyter-a")], readings[(NS, "jupyter-b")]
    assert ra.gpus == (f"0/{a.instance}",) and ra.util == (pytest.approx(80.0),) and not ra.shared
    assert rb.util == (pytest.approx(100 * s.gpu_idle_engine_active),) and not rb.shared


def test_a_time_sliced_gpu_reports_the_device_labelled_with_one_of_its_pods_by_default():
    s = scenario(SLICED)
    fleet = GpuFleet(s)
    fleet.add_node("sliced-1", 1, "Tesla T4", 16384, s.node_groups[0].sharing)
    [a] = fleet.allocate("sliced-1", NS, "jupyter-a", "notebook", 1)
    [b] = fleet.allocate("sliced-1", NS, "jupyter-b", "notebook", 1)
    assert a.gpu is b.gpu and a.uuid == b.uuid == a.gpu.uuid  # one physical GPU, as the pods see it
    assert (a.id, b.id) == (f"{a.gpu.uuid}::0", f"{a.gpu.uuid}::1")
    fleet.set_load(NS, "jupyter-a", 70, seconds=60)
    util = [(lab, v) for name, lab, v in series(fleet.metrics()) if name == "DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 1  # the physical device, once
    [(labels, value)] = util
    assert value == 70 and labels["pod"] == "jupyter-b"  # b's label on a's work: dcgm-exporter issue 307
    readings = parse_dcgm_text(fleet.metrics().decode(), NOW)
    assert set(readings) == {(NS, "jupyter-b")}  # a has no series at all
    fleet.set_load(NS, "jupyter-b", 50, seconds=60)
    assert parse_dcgm_text(fleet.metrics().decode(), NOW)[(NS, "jupyter-b")].util == (100.0,)  # capped


def _virtual_fleet(**gpu: Any) -> GpuFleet:
    """Pods a and b share a time-sliced T4 (a busy at 90 %), c holds an A100 alone."""
    s = scenario(SLICED, {"name": "whole", "gpus": 1}, kubernetesVirtualGpus=True, **gpu)
    fleet = GpuFleet(s)
    fleet.add_node("sliced-1", 1, "Tesla T4", 16384, s.node_groups[0].sharing)
    fleet.add_node("whole-1", 1, "NVIDIA A100-SXM4-40GB", 40960)
    for pod, node in (("jupyter-a", "sliced-1"), ("jupyter-b", "sliced-1"), ("jupyter-c", "whole-1")):
        fleet.allocate(node, NS, pod, "notebook", 1, uid=f"uid-{pod}")
    fleet.set_load(NS, "jupyter-a", 90, seconds=60)
    return fleet


def _by_pod(fleet: GpuFleet, metric: str) -> dict:
    return {(lab.get("pod"), lab["Hostname"]): (lab.get("vgpu"), lab.get("pod_uid"), v)
            for name, lab, v in series(fleet.metrics()) if name == metric}


def test_with_virtual_gpus_the_current_exporter_writes_device_and_per_process_series():
    """4.5.3-4.8.2: GPU_UTIL and FB_USED once for the device (no pod labels) and once per pod
    with its own processes' values and pod_uid; engine activity copied per pod; a free
    device keeps its series. The product reads each pod's own use, marked shared by vgpu."""
    fleet = _virtual_fleet()
    assert _by_pod(fleet, "DCGM_FI_DEV_GPU_UTIL") == {
        (None, "sliced-1"): (None, None, 90), (None, "whole-1"): (None, None, 0),
        ("jupyter-a", "sliced-1"): ("0", "uid-jupyter-a", 90), ("jupyter-b", "sliced-1"): ("1", "uid-jupyter-b", 0),
        ("jupyter-c", "whole-1"): (None, "uid-jupyter-c", 0)}
    assert _by_pod(fleet, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == {
        ("jupyter-a", "sliced-1"): ("0", None, 0.9), ("jupyter-b", "sliced-1"): ("1", None, 0.9),
        ("jupyter-c", "whole-1"): (None, None, pytest.approx(fleet.scenario.gpu_idle_engine_active))}
    readings = parse_dcgm_text(fleet.metrics().decode(), NOW)
    assert readings[(NS, "jupyter-a")].shared and readings[(NS, "jupyter-b")].shared
    assert readings[(NS, "jupyter-a")].util == (90.0,) and readings[(NS, "jupyter-b")].util == (0.0,)
    assert not readings[(NS, "jupyter-c")].shared and readings[(NS, "jupyter-c")].util == (0.0,)
    fleet.release(NS, "jupyter-a")
    fleet.release(NS, "jupyter-b")
    fleet.sample()
    assert {k[0] for k in _by_pod(fleet, "DCGM_FI_DEV_GPU_UTIL")} == {None, "jupyter-c"}


def test_without_host_pid_every_pod_reads_0_and_the_product_reads_no_value():
    fleet = _virtual_fleet(hostPid=False)
    util = _by_pod(fleet, "DCGM_FI_DEV_GPU_UTIL")
    assert util[(None, "sliced-1")][2] == 90 and util[("jupyter-a", "sliced-1")][2] == 0
    readings = parse_dcgm_text(fleet.metrics().decode(), NOW)
    assert readings[(NS, "jupyter-a")].util == (None,) and readings[(NS, "jupyter-a")].problem
    assert readings[(NS, "jupyter-c")].util == (0.0,)  # an idle GPU reads idle either way


def test_with_virtual_gpus_an_older_exporter_copies_each_series_per_pod():
    """Up to 4.4.1-4.5.2: each series copied per pod (pod_uid on every one), the device's
    own value in every copy; a device no pod holds has no series."""
    fleet = _virtual_fleet(exporterVersion="4.4.1-4.5.2")
    assert _by_pod(fleet, "DCGM_FI_DEV_GPU_UTIL") == {
        ("jupyter-a", "sliced-1"): ("0", "uid-jupyter-a", 90), ("jupyter-b", "sliced-1"): ("1", "uid-jupyter-b", 90),
        ("jupyter-c", "whole-1"): (None, "uid-jupyter-c", 0)}
    readings = parse_dcgm_text(fleet.metrics().decode(), NOW)
    assert readings[(NS, "jupyter-b")].util == (90.0,)  # a's work, which b's series cannot tell apart
    assert readings[(NS, "jupyter-a")].shared and not readings[(NS, "jupyter-c")].shared
    fleet.release(NS, "jupyter-a")
    fleet.release(NS, "jupyter-b")
    fleet.sample()
    assert {lab["pod"] for _, lab, _ in series(fleet.metrics())} == {"jupyter-c"}


def test_mig_instances_can_carry_gpu_util_0_as_some_exporters_write_it():
    """dcgm-exporter issue 216: GPU_UTIL 0 on every MIG instance; the product reads engine activity."""
    s = scenario(MIG, migGpuUtil=True)
    fleet = GpuFleet(s)
    fleet.add_node("mig-1", 1, "NVIDIA A100-SXM4-80GB", 81920, s.node_groups[0].sharing)
    fleet.allocate("mig-1", NS, "jupyter-a", "notebook", 1)
    fleet.set_load(NS, "jupyter-a", 80, seconds=60)
    assert {v for name, _, v in series(fleet.metrics()) if name == "DCGM_FI_DEV_GPU_UTIL"} == {0}
    assert parse_dcgm_text(fleet.metrics().decode(), NOW)[(NS, "jupyter-a")].util == (pytest.approx(80.0),)


def test_replicas_spread_over_the_gpus_before_two_pods_share_one():
    s = scenario({**SLICED, "gpus": 2})
    fleet = GpuFleet(s)
    fleet.add_node("sliced-1", 2, "Tesla T4", 16384, s.node_groups[0].sharing)
    got = [fleet.allocate("sliced-1", NS, f"p{i}", "c", 1)[0].gpu.index for i in range(4)]
    assert got == [0, 1, 0, 1]
    two = fleet.allocate("sliced-1", NS, "p4", "c", 2)
    assert sorted(d.gpu.index for d in two) == [0, 1]


# --- the nodes as registered (their pods on the real control plane: tests/controlplane/test_gpus.py)


def test_nodes_advertise_mig_instances_and_replicas():
    s = scenario(MIG, SLICED)
    mig, sliced = (node_manifest(f"{g.name}-1", g, s, version="v1.37.2") for g in s.node_groups)
    assert mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
    assert mig["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert mig["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert mig["metadata"]["labels"]["nvidia.com/gpu.count"] == "1"
    assert sliced["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    labels = sliced["metadata"]["labels"]
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.count"]) == ("4", "1")
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"


def test_renamed_replicas_are_nvidia_com_gpu_shared_which_the_product_reads_as_shared():
    s = scenario({**SLICED, "timeSlicing": {"replicas": 2, "renameByDefault": True}})
    node = node_manifest("sliced-1", s.node_groups[0], s, version="v1.37.2")
    assert node["status"]["allocatable"]["nvidia.com/gpu.shared"] == "2"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"  # renamed: no -SHARED
    info = pod_info(gpu_pod("jupyter-a", "nvidia.com/gpu.shared"))
    assert (info.gpus, info.gpu_shared) == (1, True)
