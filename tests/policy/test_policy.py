"""Unit tests of the pure reclaim policy, one decision at a time: the GPU rules (a GPU never
used, used then idle), missing data and the gaps bridged, intents, episodes, pressure,
exemptions and max-age, servers without GPUs, the config's checks, and walks minute by
minute on a simulated clock. What the kernels say: test_policy_kernels.py; the properties
over all inputs: test_policy_properties.py."""

from __future__ import annotations

import dataclasses

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Intent, Kernel, Sample, Session, SessionView
from jupyterhub_gpu_reclaim.policy.decider import decide
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig

from ..support.clock import START, at
from ..support.policy_inputs import BUSY, CFG, mins, run, samples, session, warned
from ..support.policy_walk import walk


# ---------------------------------------------------------------- never used (Yale)

def test_never_used_keep_before_30_min():
    s = samples(lambda k: 0, 29)
    d = run(SessionView(session(), s), at(29))
    assert (d.action, d.rule) == ("keep", "gpu-never-used")


def test_never_used_warns_at_30_min_with_reclaim_at_60():
    d = run(SessionView(session(), samples(lambda k: 0, 30)), at(30))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-never-used", at(60))
    assert d.measured.never_used is True and d.measured.last_used is None


def test_never_used_reclaims_at_60_after_warning_at_30():
    view = SessionView(session(), samples(lambda k: 0, 60),
                       warnings=(warned("gpu-never-used", 30, 60),))
    assert run(view, at(59.5)).action == "keep"
    d = run(view, at(60))
    assert (d.action, d.rule) == ("reclaim", "gpu-never-used")
    assert d.deadline.warned_at == at(30)


def test_reclaim_time_without_warning_warns_with_lead():
    d = run(SessionView(session(), samples(lambda k: 0, 90)), at(90))
    assert (d.action, d.reclaim_at) == ("warn", at(105))


def test_warning_too_recent_does_not_reclaim():
    view = SessionView(session(), samples(lambda k: 0, 90),
                       warnings=(warned("gpu-never-used", 85, 100),))
    d = run(view, at(90))
    assert (d.action, d.rule) == ("keep", "gpu-never-used")
    assert d.deadline.due == at(100)
    assert run(dataclasses.replace(view, samples=samples(lambda k: 0, 100)), at(100)).action == "reclaim"


# ---------------------------------------------------------------- used then idle

def used_then_idle(until, last_use=10, util=50.0, **kw):
    return samples(lambda k: util if k <= last_use else 0.0, until, **kw)


def test_idle_warns_at_60_and_reclaims_at_120():
    d = run(SessionView(session(), used_then_idle(69)), at(69))
    assert (d.action, d.rule) == ("keep", "gpu-idle")
    d = run(SessionView(session(), used_then_idle(70)), at(70))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-idle", at(130))
    assert d.idle_since == at(10)
    assert d.measured.last_used == at(10)
    view = SessionView(session(), used_then_idle(130), warnings=(warned("gpu-idle", 70, 130),))
    assert run(view, at(129)).action == "keep"
    assert (run(view, at(130)).action, run(view, at(130)).rule) == ("reclaim", "gpu-idle")


def test_slow_data_loader_at_5_percent_is_not_idle():
    view = SessionView(session(), samples(lambda k: 5.0, 600))
    d = run(view, at(600))
    assert (d.action, d.rule) == ("keep", "gpu-active")
    assert d.measured.window_max_util == (5.0,)


def test_threshold_is_configurable():
    cfg = PolicyConfig(gpu_idle_threshold=9.0)
    d = run(SessionView(session(), samples(lambda k: 5.0, 60)), at(60), config=cfg)
    # idle under a 9 % threshold, but something ran on it: the idle rule, not the never-used one
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-idle", at(120))
    assert d.measured.never_used is False


def test_open_tab_hub_activity_does_not_keep():
    s = tuple(dataclasses.replace(x, hub_last_activity=x.t) for x in used_then_idle(70))
    d = run(SessionView(session(), s), at(70))
    assert d.action == "warn"


def test_terminal_activity_does_not_keep_but_is_reported():
    s = tuple(dataclasses.replace(x, terminals=(x.t,)) for x in used_then_idle(70))
    d = run(SessionView(session(), s), at(70))
    assert d.action == "warn"
    assert d.measured.terminal_last_activity == at(70)


# ---------------------------------------------------------------- missing / stale data

@pytest.mark.parametrize("last", [None, (None,), ()])
def test_missing_gpu_data_holds(last):
    s = samples(lambda k: 0, 100)
    s = s[:-1] + (dataclasses.replace(s[-1], gpu_util=last),)
    d = run(SessionView(session(), s, warnings=(warned("gpu-never-used", 30, 60),)), at(100))
    assert (d.action, d.rule) == ("hold", "gpu-data-missing")


def test_stale_gpu_data_holds():
    s = samples(lambda k: 0, 100)
    assert run(SessionView(session(), s), at(105)).action == "warn"
    d = run(SessionView(session(), s), at(105.5))
    assert (d.action, d.rule) == ("hold", "gpu-data-missing")


def test_no_samples_holds():
    assert run(SessionView(session(), ()), at(500)).action == "hold"


def test_wrong_gpu_count_holds():
    d = run(SessionView(session(gpus=2), samples(lambda k: (0.0,), 100)), at(100))
    assert (d.action, d.rule) == ("hold", "gpu-data-missing")


def test_missing_data_in_history_restarts_the_clock():
    s = samples(lambda k: None if k == 40 else 0, 60)
    d = run(SessionView(session(), s), at(60))
    assert (d.action, d.rule) == ("keep", "gpu-never-used")
    assert d.idle_since == at(40)


def quiet(since: float, n: int = 1) -> tuple[Kernel, ...]:
    """Idle kernels last active at minute `since`."""
    return (Kernel("idle", at(since)),) * n


def gap_samples(*, gap=(40, 79), until=130, kernels_after=None, terminals=()):
    """GPU used until minute 10, idle after, no GPU data in `gap`, kernels quiet since 10
    (after the gap too, unless `kernels_after`)."""
    kernels_after = quiet(10) if kernels_after is None else kernels_after

    def one(k):
        util = None if gap[0] <= k <= gap[1] else (80.0 if k <= 10 else 0.0)
        return Sample(at(k), None if util is None else (util,),
                      kernels=kernels_after if k > gap[1] else quiet(10), terminals=terminals)
    return tuple(one(k) for k in range(until + 1))


def test_an_idle_gap_with_quiet_kernels_on_both_sides_is_bridged():
    s = gap_samples()
    assert run(SessionView(session(), s[:80]), at(79)).action == "hold"  # during the gap
    d = run(SessionView(session(), s[:81]), at(80))
    # the idle clock ran across the gap: warned as soon as the data is back
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-idle", at(130))
    assert d.idle_since == at(10)
    assert d.measured.bridged_gap == (at(39), at(80))
    assert "across a gap in the GPU data" in d.reason


@pytest.mark.parametrize("case", ["kernel active", "terminal active", "new kernel", "too long",
                                  "terminals unknown"])
def test_a_gap_is_not_bridged_without_proof(case):
    s = {"kernel active": lambda: gap_samples(kernels_after=quiet(60)),
         "terminal active": lambda: gap_samples(terminals=(at(50),)),
         "new kernel": lambda: gap_samples(kernels_after=quiet(10, 2)),
         "too long": lambda: gap_samples(gap=(40, 170), until=200),
         "terminals unknown": lambda: gap_samples(terminals=None)}[case]()
    end = round((s[-1].t - START) / mins(1))
    d = run(SessionView(session(), s), at(end))
    assert d.measured.bridged_gap is None
    assert d.measured.last_gpu_data_missing == d.idle_since


def test_walk_trimmed_window_with_a_bridged_gap_gives_the_same_result():
    def util(k):
        return None if 150 <= k <= 200 else (60 if k < 100 else 0)
    result = walk(util, 400, kernels_at=lambda k: quiet(99))
    assert result == (219, [(201, "gpu-idle", 219)])
    assert walk(util, 400, kernels_at=lambda k: quiet(99), trim=True) == result


# ---------------------------------------------------------------- intent

def test_intent_is_honoured_then_warns_before_its_end_and_reclaims_soon_after():
    intent = Intent("alice/", until=at(300), set_at=at(20))
    s = samples(lambda k: 0, 400)
    d = run(SessionView(session(), s, intent=intent), at(284))
    assert (d.action, d.rule) == ("keep", "intent")
    # the user named the time: warned warning_lead before it, reclaimed intent_grace after
    d = run(SessionView(session(), s, intent=intent), at(285))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "intent-ended", at(315))
    assert d.reason.startswith(f"the keep-alive ends at {at(300).isoformat()}")
    view = SessionView(session(), s, intent=intent, warnings=(warned("intent-ended", 285, 315),))
    assert (run(view, at(300)).action, run(view, at(314)).action) == ("keep", "keep")
    assert (run(view, at(315)).action, run(view, at(315)).rule) == ("reclaim", "intent-ended")


def test_use_near_the_intents_end_cancels_the_early_reclaim():
    # used 10 min before the end: the normal clock from that use, not the intent's
    intent = Intent("alice/", until=at(300), set_at=at(20))
    s = samples(lambda k: 70 if k == 290 else 0, 400)
    view = SessionView(session(), s, intent=intent, warnings=(warned("intent-ended", 285, 315),))
    d = run(view, at(320))
    assert (d.action, d.rule, d.cleared) == ("keep", "gpu-idle", view.warnings)
    assert run(view, at(350)).action == "warn"


def test_an_intent_shorter_than_the_rule_changes_nothing():
    # set at 20 until 40: the never-used rule warns at 50 (from the intent's setting)
    intent = Intent("alice/", until=at(40), set_at=at(20))
    d = run(SessionView(session(), samples(lambda k: 0, 60), intent=intent), at(50))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-never-used", at(80))


def test_intent_capped_at_12_hours_from_when_it_was_set():
    intent = Intent("alice/", until=at(60 * 48), set_at=at(10))
    s = samples(lambda k: 0, 60 * 13)
    d = run(SessionView(session(), s, intent=intent), at(10 + 700))
    assert d.rule == "intent" and d.measured.intent_capped is True
    d = run(SessionView(session(), s, intent=intent), at(10 + 705))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "intent-ended", at(10 + 735))


def test_warnings_before_an_intent_are_cleared():
    intent = Intent("alice/", until=at(100), set_at=at(40))
    view = SessionView(session(), samples(lambda k: 0, 200), intent=intent,
                       warnings=(warned("gpu-never-used", 30, 60),))
    d = run(view, at(150))
    assert d.action == "warn" and [w.t for w in d.cleared] == [at(30)]


# ---------------------------------------------------------------- episodes

def test_activity_after_warning_clears_the_episode():
    s = samples(lambda k: 80.0 if k == 45 else 0, 60)
    view = SessionView(session(), s, warnings=(warned("gpu-never-used", 30, 60),))
    d = run(view, at(60))
    assert d.action == "keep" and d.rule == "gpu-idle"
    assert d.cleared == view.warnings and d.shown()["cleared_warnings"] == [at(30).isoformat()]


def test_warned_session_is_not_warned_again():
    view = SessionView(session(), used_then_idle(100), warnings=(warned("gpu-idle", 70, 130),))
    d = run(view, at(100))
    assert (d.action, d.rule) == ("keep", "gpu-idle")
    assert d.deadline.warned_at == at(70)
    assert d.deadline.due == at(130)


# ---------------------------------------------------------------- pressure, exemptions, max-age

def test_pressure_only_defers_reclaim_but_warns():
    cfg = dataclasses.replace(CFG, pressure_only=True)
    assert run(SessionView(session(), samples(lambda k: 0, 30)), at(30), 0, cfg).action == "warn"
    view = SessionView(session(), samples(lambda k: 0, 60),
                       warnings=(warned("gpu-never-used", 30, 60),))
    d = run(view, at(60), 0, cfg)
    assert (d.action, d.rule, d.reason) == ("keep", "gpu-never-used",
                                            "no GPU requested by pending pods")
    assert run(view, at(60), 2, cfg).action == "reclaim"


@pytest.mark.parametrize("cfg, sess", [
    (PolicyConfig(exempt_users=frozenset({"alice"})), session()),
    (PolicyConfig(exempt_groups=frozenset({"staff"})), session(groups=frozenset({"staff", "x"}))),
    (PolicyConfig(exempt_profiles=frozenset({"a100"})), session(profile="a100")),
])
def test_exemptions(cfg, sess):
    view = SessionView(sess, samples(lambda k: 0, 200),
                       warnings=(warned("gpu-never-used", 30, 60),))
    assert (run(view, at(200), config=cfg).action, run(view, at(200), config=cfg).rule) == (
        "keep", "exempt")


def test_max_age_warns_then_reclaims_and_caps_intent():
    cfg = PolicyConfig(max_age=mins(240))
    intent = Intent("alice/", until=at(600), set_at=at(100))
    s = samples(lambda k: 50.0, 300)
    assert run(SessionView(session(), s, intent=intent), at(224), config=cfg).rule == "intent"
    d = run(SessionView(session(), s, intent=intent), at(225), config=cfg)
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "max-age", at(240))
    view = SessionView(session(), s, intent=intent, warnings=(warned("max-age", 225, 240),))
    assert run(view, at(239), config=cfg).action == "keep"
    assert (run(view, at(240), config=cfg).action, run(view, at(240), config=cfg).rule) == (
        "reclaim", "max-age")


def test_max_age_waits_for_busy_kernel():
    cfg = PolicyConfig(max_age=mins(240))
    view = SessionView(session(), samples(lambda k: 50.0, 300, kernels=BUSY),
                       warnings=(warned("max-age", 225, 240),))
    assert run(view, at(300), config=cfg).rule == "kernel-busy"


def test_partial_idleness_is_reported_not_reclaimed():
    s = samples(lambda k: (90.0, 0.0), 600, gpus=2)
    d = run(SessionView(session(gpus=2), s), at(600))
    assert (d.action, d.rule) == ("keep", "gpu-partially-idle")
    assert d.measured.idle_gpus == (1,)
    assert d.measured.window_max_util == (90.0, 0.0)


def test_multi_gpu_idle_only_when_all_are_idle():
    s = samples(lambda k: (0.0, 30.0) if k <= 10 else (0.0, 0.0), 70, gpus=2)
    d = run(SessionView(session(gpus=2), s), at(70))
    assert (d.action, d.rule) == ("warn", "gpu-idle")


# ---------------------------------------------------------------- servers without GPUs

# the z2jh chart's --timeout=3600 (idle-culler's own default is 600 s): an hour's numbers
CULLER = dataclasses.replace(CFG, cpu_timeout=mins(60))


def cpu_view(last_activity, server="", admin=False, samples_=True):
    sess = Session(id=f"bob/{server}", user="bob", server=server, gpus=0, started=START, admin=admin)
    s = (Sample(at(0), None, hub_last_activity=last_activity),) if samples_ else ()
    return SessionView(sess, s)


def test_cpu_server_idle_culler_timeout_is_inclusive():
    assert run(cpu_view(at(10)), at(69.9), config=CULLER).action == "keep"
    d = run(cpu_view(at(10)), at(70), config=CULLER)
    assert (d.action, d.rule) == ("reclaim", "idle-culler-timeout")


def test_cpu_server_without_activity_uses_started():
    assert run(cpu_view(None), at(60), config=CULLER).action == "reclaim"
    assert run(cpu_view(None, samples_=False), at(59), config=CULLER).action == "keep"
    assert run(cpu_view(None, samples_=False), at(60), config=CULLER).action == "reclaim"


def test_cpu_server_max_age_and_admin():
    cfg = dataclasses.replace(CULLER, cpu_max_age=mins(300), cull_admin_users=False)
    assert run(cpu_view(at(299), admin=True), at(300), config=cfg).rule == "idle-culler-max-age"
    # idle-culler 2.0 culls admins' servers; --cull-admin-users only concerns users
    assert run(cpu_view(at(0), admin=True), at(60), config=cfg).rule == "idle-culler-timeout"
    assert run(cpu_view(at(250)), at(299), config=cfg).action == "keep"


def test_cpu_server_named_server_flags():
    cfg = dataclasses.replace(CULLER, cull_named_servers=False, cpu_max_age=mins(300))
    assert run(cpu_view(at(0), server="x"), at(100), config=cfg).action == "keep"
    assert run(cpu_view(at(0), server="x"), at(300), config=cfg).rule == "idle-culler-max-age"
    assert run(cpu_view(at(0), server=""), at(100), config=cfg).action == "reclaim"


def test_cpu_server_ignores_exemptions_and_gpu_data():
    cfg = dataclasses.replace(CULLER, exempt_users=frozenset({"bob"}))
    assert run(cpu_view(at(0)), at(60), config=cfg).action == "reclaim"


# ---------------------------------------------------------------- config, determinism

@pytest.mark.parametrize("kw", [
    {"gpu_idle_threshold": 0}, {"gpu_idle_threshold": 101}, {"warning_lead": mins(-1)},
    {"idle_warn_after": mins(200)}, {"never_used_warn_after": mins(150)},
        {"cpu_work_warn_after": mins(200)},
    {"stale_after": mins(0)}, {"exempt_users": "alice"}, {"max_age": 3600},
])
def test_bad_config_is_rejected(kw):
    with pytest.raises(ValueError):
        PolicyConfig(**kw)


def test_decisions_are_deterministic():
    views = [SessionView(session(), samples(lambda k: 0, 30)), cpu_view(at(0))]
    a = [decide(v, now=at(60), pending_gpus=0, config=CFG) for v in views]
    assert [d.session for d in a] == ["alice/", "bob/"]
    assert a == [decide(v, now=at(60), pending_gpus=0, config=CFG) for v in views]


# ---------------------------------------------------------------- simulated clock walk

def test_walk_never_used():
    assert walk(lambda k: 0, 300) == (60, [(30, "gpu-never-used", 60)])


def test_walk_used_then_idle():
    assert walk(lambda k: 70 if k < 100 else 0, 400) == (219, [(159, "gpu-idle", 219)])


def test_walk_activity_after_warning_restarts():
    reclaim, sent = walk(lambda k: 70 if k == 40 else 0, 400)
    assert sent == [(30, "gpu-never-used", 60), (100, "gpu-idle", 160)]
    assert reclaim == 160


def test_walk_intent_then_rules():
    intent = Intent("alice/", until=at(200), set_at=at(5))
    assert walk(lambda k: 0, 400, intent=intent) == (215, [(185, "intent-ended", 215)])


def test_walk_silent_training_never_reclaimed():
    assert walk(lambda k: 50 if k < 3 else 0, 600, kernels_at=lambda k: BUSY) == (None, [])
    assert walk(lambda k: 99, 600) == (None, [])


def test_walk_trimmed_window_gives_same_result():
    def util(k):
        return None if k in (300, 301) else (60 if k < 100 or 500 < k < 520 else 0)
    assert walk(util, 900, trim=True) == walk(util, 900)
