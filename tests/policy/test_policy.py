"""Unit and property tests of the pure reclaim policy."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu_reclaim.policy.observations import Intent, Kernel, Sample, Session, SessionView, Warning
from jupyterhub_gpu_reclaim.policy.decider import decide
from jupyterhub_gpu_reclaim.policy.scan import retained_samples
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.rules import AppliedPolicy
from jupyterhub_gpu_reclaim.policy.step import step

from ..support.clock import START, at
from ..support.policy_inputs import BUSY, CFG, IDLE, PROP, configs, mins, nows, run, samples, session, views, warned


# ---------------------------------------------------------------- never used (Yale)

def test_never_used_keep_before_30_min():
    s = samples(lambda k: 0, 29)
    d = run(SessionView(session(), s), at(29))
    assert (d.action, d.rule) == ("keep", "gpu-never-used")


def test_never_used_warns_at_30_min_with_reclaim_at_60():
    d = run(SessionView(session(), samples(lambda k: 0, 30)), at(30))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-never-used", at(60))
    assert d.evidence["never_used"] is True and d.evidence["last_used"] is None


def test_never_used_reclaims_at_60_after_warning_at_30():
    view = SessionView(session(), samples(lambda k: 0, 60),
                       warnings=(warned("gpu-never-used", 30, 60),))
    assert run(view, at(59.5)).action == "keep"
    d = run(view, at(60))
    assert (d.action, d.rule) == ("reclaim", "gpu-never-used")
    assert d.evidence["warned_at"] == at(30).isoformat()


def test_reclaim_time_without_warning_warns_with_lead():
    d = run(SessionView(session(), samples(lambda k: 0, 90)), at(90))
    assert (d.action, d.reclaim_at) == ("warn", at(105))


def test_warning_too_recent_does_not_reclaim():
    view = SessionView(session(), samples(lambda k: 0, 90),
                       warnings=(warned("gpu-never-used", 85, 100),))
    d = run(view, at(90))
    assert (d.action, d.rule) == ("keep", "gpu-never-used")
    assert d.evidence["reclaim_at"] == at(100).isoformat()
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
    assert d.evidence["last_used"] == at(10).isoformat()
    view = SessionView(session(), used_then_idle(130), warnings=(warned("gpu-idle", 70, 130),))
    assert run(view, at(129)).action == "keep"
    assert (run(view, at(130)).action, run(view, at(130)).rule) == ("reclaim", "gpu-idle")


def test_slow_data_loader_at_5_percent_is_not_idle():
    view = SessionView(session(), samples(lambda k: 5.0, 600))
    d = run(view, at(600))
    assert (d.action, d.rule) == ("keep", "gpu-active")
    assert d.evidence["window_max_util"] == [5.0]


def test_threshold_is_configurable():
    cfg = PolicyConfig(gpu_idle_threshold=9.0)
    d = run(SessionView(session(), samples(lambda k: 5.0, 60)), at(60), config=cfg)
    # idle under a 9 % threshold, but something ran on it: the idle rule, not the never-used one
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-idle", at(120))
    assert d.evidence["never_used"] is False


def test_open_tab_hub_activity_does_not_keep():
    s = tuple(dataclasses.replace(x, hub_last_activity=x.t) for x in used_then_idle(70))
    d = run(SessionView(session(), s), at(70))
    assert d.action == "warn"


def test_terminal_activity_does_not_keep_but_is_reported():
    s = tuple(dataclasses.replace(x, terminals=(x.t,)) for x in used_then_idle(70))
    d = run(SessionView(session(), s), at(70))
    assert d.action == "warn"
    assert d.evidence["terminal_last_activity"] == at(70).isoformat()


# ---------------------------------------------------------------- busy kernel

def test_busy_kernel_keeps_silent_training():
    # the GPU was used (the training's first minutes), then the cell runs without output
    view = SessionView(session(), samples(lambda k: 80 if k < 5 else 0, 300, kernels=BUSY),
                       warnings=(warned("gpu-idle", 70, 130),))
    d = run(view, at(300))
    assert (d.action, d.rule) == ("keep", "kernel-busy")
    assert d.cleared == view.warnings


def silent_job(end: float, until: float, *, seen: float = 5, hub=None, after=None):
    """A cell started at minute `seen` (the last sign of its user), the GPU busy and the
    kernel busy until `end`, idle after; `hub(k)` the hub's last_activity at minute k
    (default: where the user left it), `after` a kernel's activity after the end."""
    out = []
    for k in range(int(until) + 1):
        busy = k <= end
        act = at(seen) if busy or after is None or k < after else at(after)
        out.append(Sample(at(k), (80.0 if busy else 0.0,), kernels=(Kernel("busy" if busy else "idle", act),),
                          terminals=(), hub_last_activity=hub(k) if hub else at(seen)))
    return tuple(out)


def test_work_that_ended_with_nobody_there_is_reclaimed_75_min_after_it_ended():
    # started at minute 5, ran 4 h with nobody there: the user left 4 h ago, past any lunch
    d = run(SessionView(session(), silent_job(245, 289)), at(289))
    assert (d.action, d.rule) == ("keep", "job-ended-unattended")
    d = run(SessionView(session(), silent_job(245, 290)), at(290))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "job-ended-unattended", at(320))
    assert d.evidence["last_seen"] == at(5).isoformat() and d.idle_since == at(245)
    assert "with nobody there" in d.reason and "keep it alive" in d.reason
    view = SessionView(session(), silent_job(245, 320), warnings=(warned("job-ended-unattended", 290, 320),))
    assert (run(view, at(320)).action, run(view, at(320)).rule) == ("reclaim", "job-ended-unattended")


def test_the_jobs_own_end_is_not_someone_there_and_its_clock_starts_there():
    # the cell's last messages move the kernel's last_activity as it ends (a minute after
    # its last busy sample), and the hub's with the next activity report (up to 5 min
    # later): the job ended at 246, so the hour kept for its results ends at 306, and the
    # reclaim comes after it
    s = silent_job(245, 291, after=246, hub=lambda k: at(5) if k < 249 else at(249))
    d = run(SessionView(session(), s), at(291))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "job-ended-unattended", at(321))
    assert at(246).isoformat() in d.reason


@pytest.mark.parametrize("case", ["short job", "open tab", "came back", "kernels unknown"])
def test_work_that_ended_with_someone_near_keeps_the_idle_rule(case):
    if case == "short job":  # a 1 h 50 min cell, then lunch: someone may be back soon
        s, end, expect = silent_job(115, 300), 115, ("gpu-idle", at(115 + 120))
    elif case == "open tab":  # a browser on the session throughout: nobody can say
        s, end, expect = silent_job(245, 400, hub=at), 245, ("gpu-idle", at(245 + 120))
    elif case == "came back":  # a cell run 30 min after the job: someone is there, from then
        s, end, expect = silent_job(245, 400, after=275), 245, ("gpu-idle", at(275 + 120))
    else:  # the server did not report its kernels when the work ended
        s, end = silent_job(245, 400), 245
        s = tuple(dataclasses.replace(x, kernels=None) if x.t == at(end) else x for x in s)
        expect = ("gpu-idle", at(245 + 120))
    rule, reclaim = expect
    warn_at = next(at(k) for k in range(end, 400) if run(SessionView(session(), s[:k + 1]), at(k)).action == "warn")
    d = run(SessionView(session(), s[:int((warn_at - START).total_seconds() // 60) + 1]), warn_at)
    assert (d.rule, d.reclaim_at) == (rule, reclaim), case


def test_cpu_work_on_a_never_used_gpu_is_warned_then_reclaimed():
    # a cell every few minutes, the GPU never touched: a person is there, so the never-used
    # clock does not run; the CPU work's own does (warned at 2 h of it, reclaimed at 3 h)
    def kernels(k):
        return BUSY if k % 7 < 2 else IDLE
    s = tuple(dataclasses.replace(x, kernels=kernels(k)) for k, x in enumerate(samples(lambda k: 0, 200)))
    assert run(SessionView(session(), s[:71]), at(70)).action == "keep"  # Yale's hour: no matter
    d = run(SessionView(session(), s[:121]), at(120))
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "cpu-work-on-gpu", at(180))
    assert "a CPU profile would do" in d.reason and "keep it alive" in d.reason
    assert d.evidence["cpu_work_since"] == START.isoformat()
    # the warning is answered by the keep-alive or the GPU, not by more CPU work
    view = SessionView(session(), s[:181], warnings=(warned("cpu-work-on-gpu", 120, 180),))
    assert (run(view, at(180)).action, run(view, at(180)).rule) == ("reclaim", "cpu-work-on-gpu")
    intent = Intent("alice/", until=at(300), set_at=at(130))
    assert run(dataclasses.replace(view, intent=intent), at(180)).rule == "intent"
    used = view.samples[:170] + tuple(dataclasses.replace(x, gpu_util=(40.0,)) for x in view.samples[170:172]) \
        + view.samples[172:]
    d = run(dataclasses.replace(view, samples=used), at(180))
    assert d.action == "keep" and [w.t for w in d.cleared] == [at(120)]
    # by setting, CPU work keeps the server for as long as it goes on
    old = PolicyConfig(cpu_work_keeps_unused_gpu=True)
    assert run(SessionView(session(), s[:176]), at(175), config=old).rule == "kernel-busy"
    assert run(view, at(180), config=old).action == "keep"


def test_cpu_work_that_pauses_leaves_the_idle_window_from_its_last_cell():
    # CPU cells for 20 min, then nothing for 3 h: a person who ran a cell is present for the
    # idle window after it, whatever the GPU does; the CPU-work warning is not sent
    def kernels(k):
        return BUSY if k < 20 and k % 7 < 2 else (Kernel("idle", last_activity=at(min(k, 15))),)
    s = tuple(dataclasses.replace(x, kernels=kernels(k)) for k, x in enumerate(samples(lambda k: 0, 300)))
    decisions = {k: run(SessionView(session(), s[:k + 1]), at(k)) for k in range(0, 300)}
    warn = next(k for k, d in decisions.items() if d.action == "warn")
    assert (warn, decisions[warn].rule, decisions[warn].reclaim_at) == (75, "gpu-never-used", at(135))
    assert not any(d.rule == "cpu-work-on-gpu" and d.action == "warn" for d in decisions.values())


def test_a_busy_kernel_keeps_a_gpu_touched_below_the_threshold():
    # a slow data loader at 3-8 % under a 9 % threshold: "never used" for the idle rules,
    # but something ran on the GPU, so the busy kernel is work in progress
    nine = PolicyConfig(gpu_idle_threshold=9)
    s = samples(lambda k: 3 + k % 6, 300, kernels=BUSY)
    d = run(SessionView(session(), s), at(300), config=nine)
    assert (d.action, d.rule) == ("keep", "kernel-busy")
    assert d.evidence["never_used"] is False
    # once the kernel stops, the idle rule counts from its last busy sample
    s = s[:100] + samples(lambda k: 0, 300, kernels=IDLE)[100:]
    d = run(SessionView(session(), s[:160]), at(159), config=nine)
    assert (d.action, d.rule, d.reclaim_at) == ("warn", "gpu-idle", at(219))


def test_cpu_work_after_the_gpu_was_used_is_work():
    def kernels(k):
        return BUSY if k % 7 < 2 else IDLE
    s = tuple(dataclasses.replace(x, kernels=kernels(k))
              for k, x in enumerate(samples(lambda k: 90 if k < 10 else 0, 400)))
    assert walk_view(s) is None


def test_busy_kernel_restarts_the_idle_clock():
    s = samples(lambda k: 80 if k < 5 else 0, 200)
    s = tuple(dataclasses.replace(x, kernels=BUSY) if x.t == at(50) else x for x in s)
    d = run(SessionView(session(), s[:110]), at(109))
    assert (d.action, d.rule) == ("keep", "gpu-idle")
    assert d.idle_since == at(50)
    d = run(SessionView(session(), s[:111]), at(110))
    assert (d.action, d.reclaim_at) == ("warn", at(170))


def test_unknown_kernels_hold_instead_of_reclaim():
    view = SessionView(session(), samples(lambda k: 0, 60, kernels=None),
                       warnings=(warned("gpu-never-used", 30, 60),))
    d = run(view, at(60))
    assert (d.action, d.rule) == ("hold", "kernel-data-missing")
    # but the warning itself goes out
    assert run(SessionView(session(), samples(lambda k: 0, 30, kernels=None)), at(30)).action == "warn"


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
    assert d.evidence["bridged_gap"] == [at(39).isoformat(), at(80).isoformat()]
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
    assert "bridged_gap" not in d.evidence
    assert d.evidence["last_gpu_data_missing"] == d.idle_since.isoformat()


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
    assert d.rule == "intent" and d.evidence["intent_capped"] is True
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
    assert d.evidence["warned_at"] == at(70).isoformat()
    assert d.evidence["reclaim_at"] == at(130).isoformat()


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
    assert d.evidence["idle_gpus"] == [1]
    assert d.evidence["window_max_util"] == [90.0, 0.0]


def test_multi_gpu_idle_only_when_all_are_idle():
    s = samples(lambda k: (0.0, 30.0) if k <= 10 else (0.0, 0.0), 70, gpus=2)
    d = run(SessionView(session(gpus=2), s), at(70))
    assert (d.action, d.rule) == ("warn", "gpu-idle")


# ---------------------------------------------------------------- servers without GPUs

def cpu_view(last_activity, server="", admin=False, samples_=True):
    sess = Session(id=f"bob/{server}", user="bob", server=server, gpus=0, started=START, admin=admin)
    s = (Sample(at(0), None, hub_last_activity=last_activity),) if samples_ else ()
    return SessionView(sess, s)


def test_cpu_server_idle_culler_timeout_is_inclusive():
    assert run(cpu_view(at(10)), at(69.9)).action == "keep"
    d = run(cpu_view(at(10)), at(70))
    assert (d.action, d.rule) == ("reclaim", "idle-culler-timeout")


def test_cpu_server_without_activity_uses_started():
    assert run(cpu_view(None), at(60)).action == "reclaim"
    assert run(cpu_view(None, samples_=False), at(59)).action == "keep"
    assert run(cpu_view(None, samples_=False), at(60)).action == "reclaim"


def test_cpu_server_max_age_and_admin():
    cfg = PolicyConfig(cpu_max_age=mins(300), cull_admin_users=False)
    assert run(cpu_view(at(299), admin=True), at(300), config=cfg).rule == "idle-culler-max-age"
    # idle-culler 2.0 culls admins' servers; --cull-admin-users only concerns users
    assert run(cpu_view(at(0), admin=True), at(60), config=cfg).rule == "idle-culler-timeout"
    assert run(cpu_view(at(250)), at(299), config=cfg).action == "keep"


def test_cpu_server_named_server_flags():
    cfg = PolicyConfig(cull_named_servers=False, cpu_max_age=mins(300))
    assert run(cpu_view(at(0), server="x"), at(100), config=cfg).action == "keep"
    assert run(cpu_view(at(0), server="x"), at(300), config=cfg).rule == "idle-culler-max-age"
    assert run(cpu_view(at(0), server=""), at(100), config=cfg).action == "reclaim"


def test_cpu_server_ignores_exemptions_and_gpu_data():
    cfg = PolicyConfig(exempt_users=frozenset({"bob"}))
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

def walk(util_at, minutes, *, kernels_at=lambda k: IDLE, intent=None, config=CFG, gpus=1,
         pending=1, trim=False):
    """Step minute by minute (`policy.step`, as the service and the backtest do): a sample
    each minute, the session's warnings after each step fed back. Returns (reclaim minute or
    None, warnings sent)."""
    sess = session(gpus=gpus)
    kept: tuple[Sample, ...] = ()
    warnings: tuple[Warning, ...] = ()
    sent = []
    for k in range(minutes + 1):
        u = util_at(k)
        u = u if u is None or isinstance(u, tuple) else (float(u),) * gpus
        kept = kept + (Sample(at(k), u, kernels=kernels_at(k)),)
        if trim:
            kept = retained_samples(kept, now=at(k), config=config, gpus=gpus)
        done = step(SessionView(sess, kept, intent=intent, warnings=warnings), now=at(k),
                    pending_gpus=pending, policy=AppliedPolicy(config))
        d, warnings = done.decision, done.warnings
        if d.action == "warn":
            assert warnings[-1] == Warning(sess.id, at(k), d.rule, d.reclaim_at)
            sent.append((k, d.rule, (d.reclaim_at - START) / mins(1)))
        if d.action == "reclaim":
            return k, sent
    return None, sent


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


def walk_view(s: tuple[Sample, ...]) -> int | None:
    """walk() over given samples: the reclaim minute or None."""
    by_minute = {round((x.t - START) / mins(1)): x for x in s}
    return walk(lambda k: by_minute[k].gpu_util, len(s) - 1, kernels_at=lambda k: by_minute[k].kernels)[0]


def test_walk_silent_training_never_reclaimed():
    assert walk(lambda k: 50 if k < 3 else 0, 600, kernels_at=lambda k: BUSY) == (None, [])
    assert walk(lambda k: 99, 600) == (None, [])


def test_walk_trimmed_window_gives_same_result():
    def util(k):
        return None if k in (300, 301) else (60 if k < 100 or 500 < k < 520 else 0)
    assert walk(util, 900, trim=True) == walk(util, 900)


# ---------------------------------------------------------------- properties

@PROP
@given(views(), nows, st.integers(0, 3), configs)
def test_property_gpu_invariants(view, now, pending, cfg):
    d = decide(view, now=now, pending_gpus=pending, config=cfg)
    json.dumps(d.evidence)
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
            assert d.evidence["last_used"] is None and not cfg.cpu_work_keeps_unused_gpu
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
