"""The policy tests' inputs: sessions and their samples a minute apart from START, a
decide() run, warnings, and hypothesis' strategies for views, configs and times."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from jupyterhub_gpu_reclaim.policy.observations import (
    Decision,
    Intent,
    Kernel,
    Sample,
    Session,
    SessionView,
    Warning,
)
from jupyterhub_gpu_reclaim.policy.decider import decide
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig

from .clock import START, at


def mins(n: float) -> dt.timedelta:
    return dt.timedelta(minutes=n)


# The policy tests' mechanisms are written in Yale's timings for a GPU never used (30 / 60 min) and
# a short unattended rule (45 / 75 min); the defaults, and what they read, are tested in
# test_policy_readings.py.
CFG = PolicyConfig(never_used_warn_after=mins(30), never_used_reclaim_after=mins(60),
                   unattended_warn_after=mins(45), unattended_reclaim_after=mins(75))
IDLE = (Kernel("idle"),)
BUSY = (Kernel("busy"),)


def session(gpus=1, **kw) -> Session:
    kw.setdefault("id", "alice/")
    kw.setdefault("user", "alice")
    kw.setdefault("server", "")
    return Session(gpus=gpus, started=START, **kw)


def samples(util_at, until: float, gpus=1, kernels=IDLE, **kw) -> tuple[Sample, ...]:
    """One sample a minute from START to `until` (inclusive); util_at(minute) -> util."""
    return tuple(Sample(at(k), per_gpu(util_at(k), gpus), kernels=kernels, **kw) for k in range(int(until) + 1))


def per_gpu(util, gpus: int) -> tuple | None:
    """A minute's utilization as a sample holds it: a number stands for each of `gpus`, a tuple
    (one a GPU) or None is taken as it is."""
    return util if util is None or isinstance(util, tuple) else (float(util),) * gpus


def run(view: SessionView, now: dt.datetime, pending_gpus=1, config=CFG) -> Decision:
    d = decide(view, now=now, pending_gpus=pending_gpus, config=config)
    json.dumps(d.shown())  # always JSON-serialisable, as shown and stored
    return d


def warned(rule: str, t: float, reclaim: float, sid="alice/") -> Warning:
    return Warning(sid, at(t), rule, at(reclaim))


utils = st.one_of(st.none(), st.floats(0, 100), st.sampled_from([0.0, 0.5, 1.0, 5.0, 90.0]))
kernel_states = st.one_of(st.none(), st.lists(st.sampled_from(["idle", "busy", "starting"]),
                                              max_size=2))


@st.composite
def views(draw, gpus=None):
    gpus = draw(st.integers(0, 2)) if gpus is None else gpus
    sess = Session("alice/", "alice", draw(st.sampled_from(["", "x"])), gpus, START,
                   admin=draw(st.booleans()))
    n = draw(st.integers(0, 40))
    gaps = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    t, out = 0, []
    for gap in gaps:
        t += gap
        util = draw(st.one_of(st.none(), st.tuples(*[utils] * gpus)))
        ks = draw(kernel_states)
        hub = draw(st.one_of(st.none(), st.integers(0, t)))
        # kernels' and terminals' last activity, often unchanged (gaps can be bridged)
        acts = st.one_of(st.none(), st.sampled_from([0, max(t - 25, 0)]), st.integers(0, t)).map(
            lambda x: None if x is None else at(x))
        kernels = None if ks is None else tuple(Kernel(k, draw(acts)) for k in ks)
        terminals = draw(st.one_of(st.none(), st.lists(acts, max_size=1).map(tuple)))
        out.append(Sample(at(t), util, kernels=kernels, terminals=terminals,
                          hub_last_activity=None if hub is None else at(hub)))
    intent = None
    if draw(st.booleans()):
        set_at = draw(st.integers(0, 400))
        intent = Intent(sess.id, at(set_at + draw(st.integers(-60, 1000))), at(set_at))
    warnings = tuple(
        Warning(sess.id, at(wt), rule, at(wt + lead))
        for wt, rule, lead in draw(st.lists(st.tuples(
            st.integers(0, 500), st.sampled_from(["gpu-idle", "gpu-never-used", "cpu-work-on-gpu",
                                                  "intent-ended", "max-age", "job-ended-unattended"]),
            st.integers(0, 60)), max_size=3)))
    return SessionView(sess, tuple(out), intent, tuple(sorted(warnings, key=lambda w: w.t)))


configs = st.builds(
    PolicyConfig,
    gpu_idle_threshold=st.sampled_from([0.5, 1.0, 9.0]),
    warning_lead=st.sampled_from([mins(0), mins(15), mins(30)]),
    max_age=st.sampled_from([None, mins(120), mins(300)]),
    pressure_only=st.booleans(),
    cpu_work_keeps_unused_gpu=st.booleans(),
    bridge_gaps_up_to=st.sampled_from([mins(0), mins(30), mins(120)]),
    cpu_max_age=st.sampled_from([None, mins(0), mins(200)]),
    cull_named_servers=st.booleans(),
)
nows = st.integers(0, 900).map(at)
PROP = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
