"""MIG and time-sliced sessions end to end through the reclaim cycle: the GPU readings are
the simulator's dcgm-exporter text (sim.gpus / sim.dcgm_exporter) read by the product's
parser, as the `dcgm` signal reads a scrape; hub, pods, kernels and stopper are the cycle
tests' fakes."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_reclaim_sim import scenario as sc
from gpu_reclaim_sim.gpu.gpus import GpuFleet
from jupyterhub_gpu_reclaim.signals.dcgm import parse_dcgm_text
from jupyterhub_gpu_reclaim.signals.gpu_readings import GpuReading

from ..support.clock import at
from ..support.cycles import NS
from ..support.harness import Harness

LONG = 10**6  # seconds of simulated work: longer than any test


class SimExporter:
    """The `gpu` signal reading the simulated exporter, sampled at each cycle."""

    def __init__(self, fleet: GpuFleet, clock) -> None:
        self.fleet, self.clock = fleet, clock

    async def utilization(self) -> dict[tuple[str, str], GpuReading]:
        self.fleet.sample()
        return parse_dcgm_text(self.fleet.metrics().decode(), self.clock())


def fleet(virtual: bool, **gpu) -> GpuFleet:
    s = sc.from_dict({"mode": "stub", "gpu": {"kubernetesVirtualGpus": virtual, **gpu}, "nodeGroups": [
        {"name": "sliced", "gpus": 1, "gpuModel": "Tesla T4", "timeSlicing": {"replicas": 4}},
        {"name": "mig", "gpus": 1, "gpuModel": "NVIDIA A100-SXM4-80GB", "gpuMemory": "80GiB",
         "mig": {"profile": "1g.10gb"}},
        {"name": "whole", "gpus": 1, "gpuModel": "NVIDIA L40S"},
    ]})
    f = GpuFleet(s)
    f.add_node("sliced-1", 1, "Tesla T4", 16384, s.node_groups[0].sharing)
    f.add_node("mig-1", 1, "NVIDIA A100-SXM4-80GB", 81920, s.node_groups[1].sharing)
    f.add_node("whole-1", 1, "NVIDIA L40S", 46068)
    return f


@pytest.fixture
def make(tmp_path):
    made: list[Harness] = []

    def build(virtual: bool, **gpu) -> tuple[Harness, GpuFleet]:
        h = Harness(tmp_path, gpu=False)
        made.append(h)
        f = fleet(virtual, **gpu)
        h.reclaimer.gpu = SimExporter(f, h.clock)
        return h, f

    yield build
    for h in made:
        h.store.close()


def add(h: Harness, f: GpuFleet, user: str, node: str, *, shared_resource: bool = False, gpu_type: str = "") -> str:
    sid = h.add(user, util=None)
    pod = h.pods.pods[sid]
    h.pods.pods[sid] = dataclasses.replace(pod, node=node, gpu_shared=shared_resource, gpu_type=gpu_type)
    f.allocate(node, NS, pod.name, "notebook", 1, uid=f"uid-{user}")
    return sid


@pytest.mark.parametrize("virtual", [True, False])
async def test_time_sliced_sessions_are_decided_by_their_kernels_not_the_shared_gpu(make, virtual):
    h, f = make(virtual)
    h.kernels.states["/user/bob/"] = ["busy"]  # bob trains
    # with virtual GPUs the exporter says the GPU is shared; without, only the resource
    # name (the device plugin's renameByDefault: nvidia.com/gpu.shared) can
    alice = add(h, f, "alice", "sliced-1", shared_resource=not virtual)
    bob = add(h, f, "bob", "sliced-1", shared_resource=not virtual)
    f.set_load(NS, "jupyter-bob", 90, seconds=LONG)
    await h.run_until(at(150))

    first = h.reports[0].decisions[alice]
    assert first.measured.gpu_shared is True
    if virtual:  # the exporter (4.5.3-4.8.2) gives alice's own processes' use, not bob's
        assert first.measured.shared_gpu_util == (0.0,)
    assert h.warned(alice) == [at(60)] and h.stopped(alice) == [at(120)]
    assert {rule for _, _, rule in h.decisions(alice)} == {"shared-gpu-idle-kernels"}
    assert "not this server's alone" in h.reports[12].decisions[alice].reason
    assert {(a, r) for _, a, r in h.decisions(bob)} == {("keep", "kernel-busy")} and not h.stopped(bob)
    assert h.kernels.calls  # a shared session's kernels are asked whatever its GPU reads
    # the pages and the API say so
    assert h.reclaimer.status.sessions[bob].gpu_shared is True


async def test_without_virtual_gpus_or_the_shared_resource_the_exporter_hides_the_sharing(make):
    """dcgm-exporter's default labels the device with one pod (issue 307): that pod reads as
    the GPU's only user and the others have no data, so they are held, never reclaimed."""
    h, f = make(False)
    alice = add(h, f, "alice", "sliced-1")
    bob = add(h, f, "bob", "sliced-1")
    f.set_load(NS, "jupyter-alice", 90, seconds=LONG)
    await h.run_until(at(150))
    assert {(a, r) for _, a, r in h.decisions(alice)} == {("hold", "gpu-data-missing")}
    assert {(a, r) for _, a, r in h.decisions(bob)} == {("keep", "gpu-active")}  # alice's work, on bob's label
    assert not h.stopped(alice) and not h.stopped(bob)


async def test_mig_sessions_follow_the_normal_rules_on_their_own_instance(make):
    h, f = make(True)
    carol = add(h, f, "carol", "mig-1", gpu_type="NVIDIA-A100-SXM4-80GB")
    dave = add(h, f, "dave", "mig-1")
    f.set_load(NS, "jupyter-carol", 50, seconds=LONG)
    await h.run_until(at(65))
    assert {(a, r) for _, a, r in h.decisions(carol)} == {("keep", "gpu-active")}
    assert h.warned(dave) == [at(30)] and h.stopped(dave) == [at(60)]
    assert h.reports[0].decisions[dave].rule == "gpu-never-used"
    assert h.reports[0].decisions[carol].measured.gpu_shared is False
    assert h.reports[0].decisions[carol].measured.latest_util == (pytest.approx(50.0),)
    shown = h.reclaimer.status.sessions[carol]
    assert (shown.gpu_type, shown.gpu_shared) == ("NVIDIA-A100-SXM4-80GB", False)


async def test_without_host_pid_a_busy_gpu_of_its_own_is_held_with_the_reason(make):
    """KUBERNETES_VIRTUAL_GPUS without hostPID: the exporter writes 0 for every pod, so the
    busy GPU is missing data (held, the reason in the evidence), never read as idle; a
    time-sliced session is still decided by its kernels."""
    h, f = make(True, hostPid=False)
    h.kernels.states["/user/bob/"] = ["busy"]
    erin = add(h, f, "erin", "whole-1")
    bob = add(h, f, "bob", "sliced-1")
    f.set_load(NS, "jupyter-erin", 80, seconds=LONG)
    f.set_load(NS, "jupyter-bob", 90, seconds=LONG)
    await h.run_until(at(150))
    assert {(a, r) for _, a, r in h.decisions(erin)} == {("hold", "gpu-data-missing")}
    assert not h.warned(erin) and not h.stopped(erin)
    assert "hostPID: true" in h.reports[0].decisions[erin].measured.gpu_problem
    assert {(a, r) for _, a, r in h.decisions(bob)} == {("keep", "kernel-busy")}
