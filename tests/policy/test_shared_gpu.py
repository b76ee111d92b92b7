"""The policy on a shared (time-sliced) GPU: the device's utilization is not the session's
alone, so it never decides; the kernels (and terminals) do, and missing kernel data holds.
MIG instances are a session's own: the normal rules apply to them."""

from __future__ import annotations

import dataclasses

from hypothesis import given

from jupyterhub_gpu_reclaim.policy.observations import Kernel, Sample, SessionView
from jupyterhub_gpu_reclaim.policy.decider import IDLE_RULES
from jupyterhub_gpu_reclaim.policy.scan import retained_samples

from ..support.clock import START, at
from ..support.policy_inputs import BUSY, CFG, IDLE, PROP, configs, nows, run, samples, session, views, warned

RULE = "shared-gpu-idle-kernels"


def shared(**kw):
    return session(gpu_shared=True, **kw)


def test_a_busy_shared_gpu_does_not_keep_a_server_whose_kernels_are_idle():
    # the GPU is at 95 % all along: another pod's work, as far as anyone can tell
    view = SessionView(shared(), samples(lambda k: 95, 60))
    d = run(view, at(60))
    assert (d.action, d.rule) == ("warn", RULE) and d.reclaim_at == at(120)
    assert d.measured.gpu_shared is True and d.measured.shared_gpu_util == (95.0,)
    assert d.measured.latest_util == () and d.measured.last_used is None
    assert "not this server's alone" in d.reason
    # the same server on a GPU of its own is busy
    assert (run(SessionView(session(), samples(lambda k: 95, 60)), at(60)).rule) == "gpu-active"


def test_idle_kernels_on_a_shared_gpu_are_reclaimed_on_the_idle_timings_after_a_warning():
    view = SessionView(shared(), samples(lambda k: 95, 120), warnings=(warned(RULE, 60, 120),))
    assert run(view, at(119)).action == "keep"
    d = run(view, at(120))
    assert (d.action, d.rule) == ("reclaim", RULE)
    assert RULE in IDLE_RULES  # its warnings belong to an idle episode


def test_a_busy_kernel_keeps_a_shared_gpu_server_even_if_the_gpu_reads_idle():
    view = SessionView(shared(), samples(lambda k: 0, 200, kernels=BUSY))
    d = run(view, at(200))
    assert (d.action, d.rule) == ("keep", "kernel-busy") and d.measured.gpu_shared is True


def test_kernel_and_terminal_activity_between_samples_restart_the_clock_on_a_shared_gpu():
    kernels = (Kernel("idle", last_activity=at(50)),)
    view = SessionView(shared(), samples(lambda k: 0, 100, kernels=kernels))
    d = run(view, at(100))
    assert (d.action, d.rule) == ("keep", RULE) and d.idle_since == at(50)
    # a training started from a terminal shows no kernel work: the terminal counts
    view = SessionView(shared(), samples(lambda k: 0, 100, terminals=(at(80),)))
    assert run(view, at(100)).idle_since == at(80)
    # on a GPU of its own the kernel's activity is someone running a cell too; the
    # terminal's is not (a job started there would show as GPU use)
    d = run(SessionView(session(), samples(lambda k: 0, 100, kernels=kernels)), at(100))
    assert d.idle_since == at(50)
    d = run(SessionView(session(), samples(lambda k: 0, 100, terminals=(at(80),))), at(100))
    assert (d.rule, d.idle_since) == ("gpu-never-used", START)


def test_missing_kernel_data_holds_a_shared_gpu_server_and_missing_gpu_data_does_not():
    no_kernels = SessionView(shared(), samples(lambda k: 0, 200, kernels=None))
    d = run(no_kernels, at(200))
    assert (d.action, d.rule) == ("hold", "kernel-data-missing") and d.measured.gpu_shared is True
    # no series for it (the exporter labelled the device with another pod): the kernels decide
    no_gpu = SessionView(shared(), samples(lambda k: None, 60))
    assert (run(no_gpu, at(60)).action, run(no_gpu, at(60)).rule) == ("warn", RULE)


def test_a_gap_in_the_kernel_data_restarts_the_clock_of_a_shared_gpu_server_unless_bridged():
    before = samples(lambda k: 0, 40)
    gap = tuple(Sample(at(k), (0.0,), kernels=None) for k in range(41, 60))

    def after(kernels: int) -> tuple[Sample, ...]:
        return tuple(Sample(at(k), (0.0,), kernels=(Kernel("idle", at(39)),) * kernels, terminals=())
                     for k in range(60, 101))

    # a kernel started in the gap: someone's action, unseen
    d = run(SessionView(shared(), before + gap + after(2)), at(100))
    assert d.idle_since == at(59) and d.action == "keep"
    # the same kernel, idle on both sides and no activity since: the clock runs on from
    # its last activity, before the gap
    d = run(SessionView(shared(), before + gap + after(1)), at(100))
    assert d.idle_since == at(39) and d.measured.bridged_gap == (at(40), at(60))
    assert (d.action, d.rule) == ("warn", RULE)


def test_the_never_used_rule_does_not_apply_to_a_shared_gpu():
    d = run(SessionView(shared(), samples(lambda k: 0, 45)), at(45))
    assert (d.action, d.rule) == ("keep", RULE)  # the idle timings: a warning at 60 min


def test_a_mig_instance_is_the_servers_own_gpu():
    # a MIG instance's engine activity (as percent) is the server's use: the normal rules
    view = SessionView(session(), samples(lambda k: 40 if k < 10 else 0, 70))
    d = run(view, at(70))
    assert (d.action, d.rule) == ("warn", "gpu-idle") and d.measured.gpu_shared is False


@PROP
@given(views(gpus=1), nows, configs)
def test_property_utilization_never_decides_for_a_shared_gpu(view, now, cfg):
    view = dataclasses.replace(view, session=dataclasses.replace(view.session, gpu_shared=True))
    busy = dataclasses.replace(view, samples=tuple(dataclasses.replace(s, gpu_util=(100.0,)) for s in view.samples))
    none = dataclasses.replace(view, samples=tuple(dataclasses.replace(s, gpu_util=None) for s in view.samples))
    a, b, c = (run(v, now, config=cfg) for v in (view, busy, none))
    assert (a.action, a.rule, a.reclaim_at) == (b.action, b.rule, b.reclaim_at) == (c.action, c.rule, c.reclaim_at)
    assert a.rule not in ("gpu-data-missing", "gpu-active", "gpu-idle", "gpu-never-used", "cpu-work-on-gpu")
    latest = [s for s in view.samples if s.t <= now][-1:] or None
    if a.action == "reclaim":
        assert latest and latest[0].kernels is not None
        assert not any(k.execution_state == "busy" for k in latest[0].kernels)


@PROP
@given(views(gpus=1), nows, configs)
def test_property_retained_samples_decide_the_same_for_a_shared_gpu(view, now, cfg):
    view = dataclasses.replace(view, session=dataclasses.replace(view.session, gpu_shared=True))
    kept = retained_samples(view.samples, now=now, config=cfg, gpus=1, shared=True)
    a = run(view, now, config=cfg)
    b = run(dataclasses.replace(view, samples=kept), now, config=cfg)
    assert a == b


def test_config_defaults_are_the_ones_the_tests_assume():
    assert (CFG.idle_warn_after.total_seconds(), CFG.idle_reclaim_after.total_seconds()) == (3600, 7200)
    assert IDLE == (Kernel("idle"),)
