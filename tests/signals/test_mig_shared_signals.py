"""The signals on MIG and time-sliced GPUs: a MIG instance or a replica counts as a GPU
held, and a GPU the exporter shows under several pods (or with `vgpu`) is read as shared."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.signals.dcgm import parse_dcgm_text, series_from_text
from jupyterhub_gpu_reclaim.signals.exporter_check import exporter_self_check
from jupyterhub_gpu_reclaim.signals.gpu_readings import Series, readings_from_series
from jupyterhub_gpu_reclaim.signals.pods import pod_info
from jupyterhub_gpu_reclaim.signals.prometheus import DEFAULT_QUERY, readings_from_query_result

from ..support.signal_inputs import k8s_pod, series, vector

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def with_limits(**limits: str) -> dict:
    pod = k8s_pod("jupyter-m", "m", gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": dict(limits)}
    return pod


def test_a_mig_instance_or_a_replica_counts_as_a_gpu_held():
    mig = pod_info(with_limits(**{"nvidia.com/mig-1g.10gb": "2"}))
    assert (mig.gpus, mig.gpu_shared, mig.invalid) == (2, False, None)
    shared = pod_info(with_limits(**{"nvidia.com/gpu.shared": "1"}))
    assert (shared.gpus, shared.gpu_shared) == (1, True)
    plain = pod_info(with_limits(**{"nvidia.com/gpu": "1", "example.com/fpga": "3"}))
    assert (plain.gpus, plain.gpu_shared) == (1, False)
    bad = pod_info(with_limits(**{"nvidia.com/mig-1g.10gb": "half"}))
    assert bad.invalid and "nvidia.com/mig-1g.10gb" in bad.invalid


def test_a_pod_says_its_gpus_by_kind_as_it_asks_for_them():
    """The kinds the pages name (requested_by_kind): a pod asking for two kinds is said with
    both; the pods asking alike share one value (20,000 pods: one pointer each)."""
    assert pod_info(with_limits(**{"nvidia.com/mig-1g.10gb": "2"})).gpu_kinds == (("mig", 2),)
    assert pod_info(with_limits(**{"nvidia.com/gpu.shared": "1"})).gpu_kinds == (("shared", 1),)
    both = pod_info(with_limits(**{"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1", "example.com/fpga": "3"}))
    assert (both.gpus, both.gpu_kinds) == (2, (("gpu", 1), ("mig", 1)))
    assert pod_info(with_limits(cpu="1")).gpu_kinds == ()
    one, other = (pod_info(with_limits(**{"nvidia.com/mig-1g.10gb": "1"})) for _ in range(2))
    assert one.gpu_kinds is other.gpu_kinds


def test_a_replica_named_nvidia_com_gpu_is_shared_by_the_product_it_selects():
    """Time-slicing without renameByDefault: the replicas keep the name nvidia.com/gpu, and
    GPU feature discovery labels the node's product `<model>-SHARED`; a profile for those
    nodes selects on it."""
    def on(product: str, **limits: str):
        pod = with_limits(**limits)
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
        return pod_info(pod)

    sliced = on("Tesla-T4-SHARED", **{"nvidia.com/gpu": "1"})
    assert (sliced.gpus, sliced.gpu_shared, sliced.gpu_type, sliced.gpu_kinds) == (
        1, True, "Tesla-T4-SHARED", (("shared", 1),))
    whole = on("Tesla-T4", **{"nvidia.com/gpu": "1"})
    assert (whole.gpus, whole.gpu_shared, whole.gpu_type, whole.gpu_kinds) == (1, False, "Tesla-T4", (("gpu", 1),))
    # a pod without a GPU on such a node shares nothing
    assert not on("Tesla-T4-SHARED", cpu="1").gpu_shared


def test_a_pod_waiting_for_a_mig_instance_is_gpu_demand():
    pod = with_limits(**{"nvidia.com/mig-1g.10gb": "1"})
    pod["spec"]["nodeName"], pod["status"]["phase"] = None, "Pending"  # not placed yet
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb."}]
    assert pod_info(pod).waits_for_gpu
    # a taint names the resource too, but keeps the pod off a node: no GPU is short
    pod["status"]["conditions"][0]["message"] = ("0/3 nodes are available: 3 node(s) had untolerated "
                                                 "taint {nvidia.com/gpu: present}.")
    assert not pod_info(pod).waits_for_gpu


def test_a_device_under_two_pods_is_shared_for_both():
    text = (series("DCGM_FI_DEV_GPU_UTIL", 0, 80, "jupyter-a", "jhub", uuid="GPU-1")
            + series("DCGM_FI_DEV_GPU_UTIL", 0, 80, "jupyter-b", "jhub", uuid="GPU-1")
            + series("DCGM_FI_DEV_GPU_UTIL", 0, 5, "jupyter-c", "jhub", host="gpu-2", uuid="GPU-2"))
    r = parse_dcgm_text(text, T0)
    assert r[("jhub", "jupyter-a")].shared and r[("jhub", "jupyter-b")].shared
    assert not r[("jhub", "jupyter-c")].shared  # gpu="0" of another node: another GPU


def test_the_vgpu_label_marks_a_shared_device_even_with_one_pod_on_it():
    text = series("DCGM_FI_DEV_GPU_UTIL", 0, 10, "jupyter-a", "jhub", extra=',vgpu="2"')
    assert parse_dcgm_text(text, T0)[("jhub", "jupyter-a")].shared


def test_mig_instances_of_one_gpu_are_not_shared():
    mig = ',GPU_I_ID="{}",GPU_I_PROFILE="1g.10gb"'
    text = (series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 0.5, "jupyter-a", "jhub", uuid="GPU-1", extra=mig.format(1))
            + series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 0.1, "jupyter-b", "jhub", uuid="GPU-1", extra=mig.format(2)))
    r = parse_dcgm_text(text, T0)
    assert not r[("jhub", "jupyter-a")].shared and not r[("jhub", "jupyter-b")].shared
    assert r[("jhub", "jupyter-a")].util == (50.0,)


def test_without_hostname_or_uuid_a_repeated_gpu_index_proves_nothing():
    """A custom query that keeps only `gpu`: gpu="0" of two nodes is not one device."""
    s = [Series("DCGM_FI_DEV_GPU_UTIL", {"pod": p, "namespace": "jhub", "gpu": "0"}, 1) for p in ("a", "b")]
    r = readings_from_series(s, T0)
    assert not r[("jhub", "a")].shared and not r[("jhub", "b")].shared


def test_the_default_query_keeps_what_tells_a_shared_gpu():
    assert all(label in DEFAULT_QUERY for label in ("Hostname", "UUID", "vgpu"))
    common = {"exported_namespace": "jhub", "gpu": "0", "Hostname": "gpu-1", "UUID": "GPU-1", "field": "util"}
    answer = vector(({**common, "exported_pod": "a", "vgpu": "0"}, 70), ({**common, "exported_pod": "b", "vgpu": "1"}, 70),
                    ({**common, "exported_pod": "c", "Hostname": "gpu-2", "UUID": "GPU-2"}, 3))
    r = readings_from_query_result(answer)
    assert r[("jhub", "a")].shared and r[("jhub", "b")].shared and not r[("jhub", "c")].shared


def test_a_mig_instance_without_engine_activity_has_no_value_and_the_self_check_says_so():
    """GPU_UTIL on a MIG instance is never its utilization (0 in some exporters: issue 216);
    without DCGM_FI_PROF_GR_ENGINE_ACTIVE the instance has no value, and the check warns."""
    mig = ',GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"'
    text = (series("DCGM_FI_DEV_GPU_UTIL", 0, 0, "jupyter-m", "jhub", extra=mig)
            + series("DCGM_FI_DEV_FB_USED", 0, 900, "jupyter-m", "jhub", extra=mig))
    assert parse_dcgm_text(text, T0)[("jhub", "jupyter-m")].util == (None,)
    findings = {f.code: f for f in exporter_self_check(series_from_text(text))}
    assert {"mig", "mig-gpu-util", "mig-without-engine"} <= set(findings)
    assert findings["mig-without-engine"].warning and not findings["mig-gpu-util"].warning
