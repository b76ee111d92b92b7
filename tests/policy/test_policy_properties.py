"""Property tests of the pure reclaim policy (hypothesis, over views, times and configs): what
holds of every GPU decision, servers without GPUs decided by idle-culler's rules, and the
trimmed history deciding as the whole one."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu_reclaim.policy.decider import decide
from jupyterhub_gpu_reclaim.policy.scan import retained_samples

from ..support.policy_inputs import PROP, configs, nows, views


# ---------------------------------------------------------------- properties

@PROP
@given(views(), nows, st.integers(0, 3), configs)
def test_property_gpu_invariants(view, now, pending, cfg):
    d = decide(view, now=now, pending_gpus=pending, config=cfg)
    json.dumps(d.shown())
    assert d.session == view.session.id
    if view.session.gpus == 0:
        return
    seen = [s for s in view.samples if s.t <= now]
    latest = seen[-1] if seen else None
    missing = (latest is None or now - latest.t > cfg.stale_after or latest.gpu_util is None
               or None in latest.gpu_util or len(latest.gpu_util) != view.session.gpus)
    if d.action == "reclaim":
        assert any(w.t <= now - cfg.warning_lead and w.reclaim_at <= now
                   for w in view.warnings)
        intent = view.intent
        if intent is not None and intent.set_at <= now:
            end = min(intent.until, intent.set_at + cfg.max_keepalive)
            if cfg.max_age:
                end = min(end, view.session.started + cfg.max_age)
            assert end <= now
        # a busy kernel is work once the GPU was used (the never-used rule ignores it)
        if d.rule != "cpu-work-on-gpu":
            assert not any(k.execution_state == "busy" for k in (latest.kernels or ()))
        else:
            assert d.measured.last_used is None and not cfg.cpu_work_keeps_unused_gpu
        assert latest.kernels is not None
        assert not (cfg.pressure_only and pending == 0)
    if missing:
        assert (d.action, d.rule) == ("hold", "gpu-data-missing")
    if d.action == "warn":
        assert d.reclaim_at >= now + cfg.warning_lead
        if d.rule == "max-age":  # max-age warnings are never cleared: one is enough
            assert not any(w.rule == "max-age" and w.t <= now for w in view.warnings)


@PROP
@given(views(gpus=0), nows, configs)
def test_property_non_gpu_is_idle_culler(view, now, cfg):
    d = decide(view, now=now, pending_gpus=0, config=cfg)
    seen = [s for s in view.samples if s.t <= now]
    last = (seen[-1].hub_last_activity if seen else None) or view.session.started
    inactive = (now - last).total_seconds()
    age = (now - view.session.started).total_seconds()
    kind = cfg.cull_named_servers if view.session.server else cfg.cull_default_servers
    culled = (inactive >= cfg.cpu_timeout.total_seconds() and kind) or bool(
        cfg.cpu_max_age and age >= cfg.cpu_max_age.total_seconds())
    assert d.action == ("reclaim" if culled else "keep")
    assert d.reclaim_at is None


@PROP
@given(views(gpus=1), nows, configs)
def test_property_retained_samples_decide_the_same(view, now, cfg):
    kept = retained_samples(view.samples, now=now, config=cfg, gpus=1)
    a = decide(view, now=now, pending_gpus=1, config=cfg)
    b = decide(dataclasses.replace(view, samples=kept), now=now, pending_gpus=1, config=cfg)
    assert a == b
