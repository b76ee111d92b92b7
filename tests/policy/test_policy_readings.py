"""The readings the default policy is built on (docs/policy.md, "What the policy reads"),
each on the behaviour it reads: a person running cells is present whatever the GPU does,
low utilization is use, CPU work that goes on is a wrong profile and CPU work that stops is
a person gone, a first hour of nothing is not a forgotten server, and a job's end is not its
owner's absence."""

from __future__ import annotations

import dataclasses

from jupyterhub_gpu_reclaim.policy.observations import Kernel, Sample, SessionView, Warning
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.readings import MEMORY_HELD_MIB, cpu_work_since, gpu_touched

from ..support.clock import START, at
from ..support.policy_inputs import IDLE, mins, run, samples, session

DEFAULTS = PolicyConfig()


def first(view: SessionView, until: int, action: str) -> tuple[int, object] | None:
    """The first minute (and decision) with `action`, deciding each minute on the samples up to
    it with the warnings sent so far, as the service does."""
    sent: list[Warning] = []
    for k in range(until + 1):
        d = run(SessionView(view.session, view.samples[:k + 1], view.intent, tuple(sent)), at(k),
                config=DEFAULTS)
        if d.action == action:
            return k, d
        if d.action == "warn":
            sent.append(Warning(view.session.id, at(k), d.rule, d.reclaim_at))
    return None


def cells(minutes: set[int], gpu=lambda k: 0.0, until=600, mem=None) -> SessionView:
    """A cell (busy kernel) at each of `minutes`, the kernel's last_activity following them."""
    out, last = [], START
    for k in range(until + 1):
        busy = k in minutes
        if busy:
            last = at(k)
        u = gpu(k) if busy else 0.0
        out.append(Sample(at(k), (u,), gpu_mem_used_mib=(mem,) if mem is not None else None,
                          kernels=(Kernel("busy" if busy else "idle", last_activity=last),)))
    return SessionView(session(), tuple(out))


def test_a_person_running_cpu_cells_is_present_whatever_the_gpu_does():
    # real sessions: CPU cells in the first hour, the GPU 13-90 min later; the last cell at
    # 55 min: the server is not reclaimed before two hours after it
    view = cells({k for k in range(40, 56) if k % 5 < 2})
    warn, d = first(view, 600, "warn")
    assert (warn, d.rule, d.reclaim_at) == (115, "gpu-never-used", at(175))
    assert first(view, 174, "reclaim") is None
    assert first(view, 175, "reclaim")[0] == 175


def test_a_first_hour_of_nothing_is_not_a_forgotten_server():
    # nothing run for the first hour: warned at 1 h, reclaimed at 2 h (6 of 51 real sessions
    # ran their first cell 60-120 min after the start)
    view = SessionView(session(), samples(lambda k: 0, 300))
    (warn, d), (reclaim, _) = first(view, 300, "warn"), first(view, 300, "reclaim")
    assert (warn, d.rule, d.reclaim_at, reclaim) == (60, "gpu-never-used", at(120), 120)


def test_low_utilization_with_a_busy_kernel_is_use():
    # a real cell at 0.125 %: the GPU was used, so the wrong-profile rule does not apply
    kernels = (Kernel("busy", last_activity=at(0)),)
    low = Sample(at(1), (0.125,), kernels=kernels)
    assert gpu_touched(low, (0.125,), 1.0)
    assert not gpu_touched(dataclasses.replace(low, kernels=IDLE), (0.125,), 1.0)  # an idle engine's noise
    view = cells(set(range(0, 201)), gpu=lambda k: 0.4, until=200)
    d = run(view, at(200), config=DEFAULTS)
    assert (d.action, d.rule, d.measured.never_used) == ("keep", "kernel-busy", False)
    assert run(cells(set(range(0, 201)), until=200), at(200), config=DEFAULTS).rule == "cpu-work-on-gpu"


def test_gpu_memory_held_is_use_and_reserved_memory_is_not():
    idle = Sample(at(0), (0.0,), gpu_mem_used_mib=(6000.0,), kernels=IDLE)
    assert gpu_touched(idle, (0.0,), 1.0)  # a model loaded: the GPU was used, now idle
    assert not gpu_touched(dataclasses.replace(idle, gpu_mem_used_mib=(MEMORY_HELD_MIB - 1,)), (0.0,), 1.0)
    # the real trace has no memory reading (null): nothing is read from it
    assert not gpu_touched(dataclasses.replace(idle, gpu_mem_used_mib=None), (0.0,), 1.0)
    # CPU cells with the model in GPU memory: not a wrong profile, the idle rule from the last cell
    d = run(cells(set(range(0, 201)), mem=6000.0, until=200), at(200), config=DEFAULTS)
    assert (d.rule, d.measured.never_used) == ("kernel-busy", False)


def test_data_preparation_that_goes_on_to_the_gpu_is_not_interrupted():
    # CPU cells for 2.5 h (warned at 2 h: a CPU profile would do), then the GPU
    prep = {k for k in range(0, 150) if k % 6 < 2}
    view = cells(prep | set(range(150, 170)), gpu=lambda k: 0.0 if k < 150 else 40.0, until=300)
    warn, d = first(view, 300, "warn")
    assert (warn, d.rule, d.reclaim_at) == (120, "cpu-work-on-gpu", at(180))
    assert first(view, 285, "reclaim") is None  # the GPU used at 150: the idle rule from 169


def test_cpu_work_since_reads_the_run_of_cells_up_to_now():
    hour = mins(60)
    times = [at(k) for k in (0, 30, 100, 130, 150)]
    assert cpu_work_since(times, now=at(160), pause=hour, since=START) == at(100)  # 70 min pause before
    assert cpu_work_since(times, now=at(210), pause=hour, since=START) is None  # nothing for an hour
    assert cpu_work_since(times[:2], now=at(40), pause=hour, since=at(10)) == at(10)  # as far as seen


def test_a_jobs_end_is_not_its_owners_absence():
    # a 5 h silent job, nobody there: reclaimed 2 h after it ended (real owners came back
    # 139 and 149 min after day-long jobs), under its own rule and warning
    job = set(range(10, 310))
    view = cells({1, 2} | job, gpu=lambda k: 90.0 if k in job else 30.0, until=600)
    view = dataclasses.replace(view, samples=tuple(
        dataclasses.replace(s, kernels=(Kernel(s.kernels[0].execution_state, last_activity=at(min(k, 10))),))
        for k, s in enumerate(view.samples)))
    warn, d = first(view, 600, "warn")
    reclaim, r = first(view, 600, "reclaim")
    assert (warn, d.rule, reclaim, r.rule) == (369, "job-ended-unattended", 429, "job-ended-unattended")
    assert "keep it alive if you will come back to its results" in d.reason
