"""Backtest: replaying traces through the real policy on a virtual clock."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from jupyterhub_gpu_reclaim.replay.backtest import (
    ZeroRun,
    backtest,
    idle_culler_rule,
    load_policy_config,
    zero_gpu_rule,
)
from jupyterhub_gpu_reclaim.replay.backtest_report import format_report
from jupyterhub_gpu_reclaim.durations import parse_duration
from jupyterhub_gpu_reclaim.errors import ConfigError
from jupyterhub_gpu_reclaim.policy.observations import Sample, Session
from jupyterhub_gpu_reclaim.policy.decider import decide
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig

from ..support.clock import START, at
from ..support.traces import EXAMPLE, Trace, cli, generate_trace, idle_open_tab, ts

MIN = dt.timedelta(minutes=1)


def training_silent(gpus=1):
    """A training cell running with no browser open: GPU 95%, kernel busy, hub activity stale."""
    return lambda m: {"gpu_util": [95.0] * gpus,
                      "kernels": [{"execution_state": "busy", "last_activity": ts(at(m))}],
                      "hub_last_activity": ts(START)}


def no_gpu_data():
    return lambda m: {"gpu_util": None, "kernels": [{"execution_state": "idle", "last_activity": ts(START)}],
                      "hub_last_activity": ts(START)}


CFG = PolicyConfig()


def run(trace: Trace, tmp_path, **kw):
    return backtest(trace.write(tmp_path / "t.jsonl"), **kw)


# --------------------------------------------------------------------------- the policy's runs


def test_never_used_session_warned_then_reclaimed(tmp_path):
    report = run(Trace(hours=6).session("alice/", start=0, sample=idle_open_tab()), tmp_path)
    warn_at = CFG.never_used_warn_after
    reclaim_at = max(CFG.never_used_reclaim_after, warn_at + CFG.warning_lead)
    assert report["warnings"][0] == {"session": "alice/", "t": ts(START + warn_at), "rule": "gpu-never-used",
                                     "reclaim_at": ts(START + reclaim_at)}
    assert report["reclaims"] == [{"session": "alice/", "t": ts(START + reclaim_at), "rule": "gpu-never-used",
                                   "gpus": 1, "gpu_hours_freed": 6 - reclaim_at.total_seconds() / 3600,
                                   "user_returned": None, "returned": "never"}]
    assert report["summary"] == {"gpu_hours_held": 6.0, "gpu_hours_freed": 6 - reclaim_at.total_seconds() / 3600,
                                 "reclaims": 1, "warnings": len(report["warnings"]), "users_interrupted": 0,
                                 "returned": {"under_30m": 0, "under_2h": 0, "under_8h": 0, "later": 0, "never": 1}}
    # every reclaim comes at least warning_lead after the first warning
    assert reclaim_at - warn_at >= CFG.warning_lead
    assert report["holds"] == []
    assert "score" not in report


def test_used_then_idle_two_gpus_natural_end_is_stopped(tmp_path):
    # busy for an hour, then idle with the tab open; the user would have stopped it at 7 h
    def sample(m):
        if m < 60:
            return training_silent(2)(m)
        return idle_open_tab(2)(m)

    report = run(Trace(hours=10).session("bob/", start=0, stop=7 * 60, gpus=2, sample=sample), tmp_path)
    idle_since = at(55)  # the last sample with the GPU used
    warn = report["warnings"][0]
    assert warn["rule"] == "gpu-idle"
    reclaim = report["reclaims"][0]
    assert reclaim["rule"] == "gpu-idle" and reclaim["gpus"] == 2
    t = dt.datetime.fromisoformat(reclaim["t"])
    assert t - dt.datetime.fromisoformat(warn["t"]) >= CFG.warning_lead
    assert t - idle_since >= CFG.idle_reclaim_after
    assert t - idle_since < CFG.idle_reclaim_after + 2 * 5 * MIN + CFG.warning_lead
    assert reclaim["gpu_hours_freed"] == pytest.approx(2 * (at(7 * 60) - t).total_seconds() / 3600)
    assert report["summary"]["gpu_hours_held"] == pytest.approx(14.0)


def test_busy_session_is_kept(tmp_path):
    report = run(Trace(hours=12).session("carol/", sample=training_silent()), tmp_path)
    assert report["warnings"] == [] and report["reclaims"] == [] and report["holds"] == []


def test_missing_data_is_held_not_reclaimed_and_holds_are_deduplicated(tmp_path):
    def sample(m):
        # data for 30 min, then the exporter is down for 3 h, then back (GPU idle)
        if 30 <= m < 210:
            return no_gpu_data()(m)
        return idle_open_tab()(m)

    report = run(Trace(hours=4).session("dave/", sample=sample), tmp_path)
    assert report["reclaims"] == [] or all(
        r["t"] > ts(at(210)) for r in report["reclaims"])
    holds = report["holds"]
    assert len(holds) == 1
    assert holds[0]["session"] == "dave/" and holds[0]["reason"] == "gpu-data-missing"
    assert holds[0]["t"] >= ts(at(30)) and holds[0]["last"] == ts(at(205))
    assert holds[0]["samples"] >= 1


def test_intent_is_honoured(tmp_path):
    trace = (Trace(hours=8).session("erin/", sample=idle_open_tab())
             .intent(10, "erin/", 5 * 60))
    report = run(trace, tmp_path)
    # warned `warning_lead` before the intent ends, reclaimed `intent_grace` after it
    end = at(5 * 60)
    assert [w["rule"] for w in report["warnings"]] == ["intent-ended"]
    assert report["warnings"][0]["t"] == ts(end - CFG.warning_lead)
    assert report["reclaims"][0]["rule"] == "intent-ended"
    assert report["reclaims"][0]["t"] == ts(end + CFG.intent_grace)
    # without the intent it would have gone within the first hours
    plain = run(Trace(hours=8).session("erin/", sample=idle_open_tab()), tmp_path)
    assert plain["reclaims"][0]["t"] < ts(at(5 * 60))


def test_intent_cleared_by_null(tmp_path):
    trace = (Trace(hours=8).session("erin/", sample=idle_open_tab())
             .intent(10, "erin/", 7 * 60).intent(20, "erin/", None))
    with_clear = run(trace, tmp_path)
    plain = run(Trace(hours=8).session("erin/", sample=idle_open_tab()), tmp_path)
    assert with_clear["reclaims"] == plain["reclaims"]


def test_warning_cleared_when_session_becomes_active(tmp_path):
    # idle, warned, then the GPU gets busy before the reclaim: no reclaim; the next idle
    # episode is warned again before being reclaimed
    warn = CFG.never_used_warn_after.total_seconds() / 60

    def sample(m):
        if warn + 5 <= m < warn + 30:
            return training_silent()(m)
        return idle_open_tab()(m)

    report = run(Trace(hours=8).session("fay/", sample=sample), tmp_path)
    assert report["warnings"][0]["t"] == ts(at(warn))
    reclaim_t = report["reclaims"][0]["t"]
    second = [w for w in report["warnings"] if w["t"] > ts(at(warn + 5))]
    assert second and second[0]["rule"] == "gpu-idle" and second[0]["t"] < reclaim_t


def test_reclaim_ends_the_session_and_labels_score(tmp_path):
    trace = (Trace(hours=6)
             .session("alice/", sample=idle_open_tab())           # reclaimable all along
             .session("bob/", sample=idle_open_tab())             # labelled must_keep: a false reclaim
             .session("carol/", sample=training_silent())
             .label("alice/", 0, 360, "reclaimable")
             .label("bob/", 0, 360, "must_keep")
             .label("carol/", 0, 360, "must_keep"))
    report = run(trace, tmp_path)
    reclaimed = {r["session"]: r for r in report["reclaims"]}
    assert set(reclaimed) == {"alice/", "bob/"}
    t = dt.datetime.fromisoformat(reclaimed["alice/"]["t"])
    score = report["score"]
    assert score["false_reclaims"] == 1
    assert score["false_reclaim_list"][0]["session"] == "bob/"
    assert score["reclaimable_gpu_hours"] == 6.0
    assert score["reclaimable_gpu_hours_recovered"] == pytest.approx((at(360) - t).total_seconds() / 3600)
    assert score["recovered_share"] == pytest.approx(score["reclaimable_gpu_hours_recovered"] / 6, abs=1e-4)
    assert report["summary"]["gpu_hours_held"] == 18.0


def test_pressure_only_waits_for_pending_gpus(tmp_path):
    cfg = dataclasses.replace(CFG, pressure_only=True)
    trace = Trace(hours=6).session("alice/", sample=idle_open_tab()).pressure(0, 0).pressure(240, 2)
    report = run(trace, tmp_path, config=cfg)
    assert report["warnings"]
    assert report["reclaims"] and report["reclaims"][0]["t"] >= ts(at(240))
    assert report["policy"]["pressure_only"] is True


# --------------------------------------------------------------------------- reference rules


def test_idle_culler_culls_silent_training_and_misses_open_tab(tmp_path):
    trace = (Trace(hours=6)
             .session("trainer/", sample=training_silent())
             .session("idler/", sample=idle_open_tab())
             .label("trainer/", 0, 360, "must_keep")
             .label("idler/", 0, 360, "reclaimable"))
    report = run(trace, tmp_path)
    culler = report["baselines"]["idle-culler"]
    assert culler["reclaims"] == 1 and culler["false_reclaims"] == 1
    assert culler["reclaimable_gpu_hours_recovered"] == 0 and culler["recovered_share"] == 0
    # the culler's rule: strictly more than an hour after last_activity → first sample after 09:00
    assert culler["gpu_hours_freed"] == pytest.approx((360 - 65) / 60)
    zero = report["baselines"]["zero-gpu-2h"]
    assert zero["reclaims"] == 1 and zero["false_reclaims"] == 0
    assert zero["reclaimable_gpu_hours_recovered"] == pytest.approx(4.0)
    # the policy keeps the trainer and reclaims the idler
    assert [r["session"] for r in report["reclaims"]] == ["idler/"]
    assert report["score"]["false_reclaims"] == 0


def test_reference_rule_functions():
    s = Session(id="a/", user="a", server="", gpus=1, started=START)
    fresh = Sample(t=at(120), gpu_util=(0.0,), hub_last_activity=at(119))
    stale = Sample(t=at(120), gpu_util=(99.0,), hub_last_activity=at(60))
    none = Sample(t=at(61), gpu_util=(99.0,), hub_last_activity=None)
    assert not idle_culler_rule(s, fresh, at(120))
    assert not idle_culler_rule(s, stale, at(120))  # exactly one hour: not more
    assert idle_culler_rule(s, stale, at(121))
    assert idle_culler_rule(s, none, at(61))  # no activity: counted from started
    state = ZeroRun()
    assert not zero_gpu_rule(state, Sample(t=at(0), gpu_util=(0.0,)), at(0))
    assert not zero_gpu_rule(state, Sample(t=at(119), gpu_util=(0.0,)), at(119))
    assert zero_gpu_rule(state, Sample(t=at(120), gpu_util=(0.0,)), at(120))
    state = ZeroRun()
    zero_gpu_rule(state, Sample(t=at(0), gpu_util=(0.0,)), at(0))
    zero_gpu_rule(state, Sample(t=at(60), gpu_util=None), at(60))  # a gap breaks the run
    assert not zero_gpu_rule(state, Sample(t=at(120), gpu_util=(0.0,)), at(120))
    assert not zero_gpu_rule(ZeroRun(since=at(0)), Sample(t=at(200), gpu_util=(0.0, 3.0)), at(200))


# --------------------------------------------------------------------------- whole traces


def whole_traces(tmp_path) -> list[Path]:
    path = tmp_path / "generated.jsonl"
    generate_trace(path, lines=5000, seed=7)
    return [path] + ([EXAMPLE] if EXAMPLE.exists() else [])


def test_compact_view_decides_like_the_full_history(tmp_path):
    for path in whole_traces(tmp_path):
        calls_full, calls_compact = [], []

        def recording(calls):
            def wrapped(view, *, now, pending_gpus, config):
                d = decide(view, now=now, pending_gpus=pending_gpus, config=config)
                calls.append((view.session.id, now, len(view.samples) and view.samples[-1].t, d))
                return d
            return wrapped

        full = backtest(path, config=CFG, decide=recording(calls_full), compact=False)
        compact = backtest(path, config=CFG, decide=recording(calls_compact))
        assert calls_compact == calls_full
        assert compact == full


def test_whole_trace_invariants(tmp_path):
    for path in whole_traces(tmp_path):
        report = backtest(path)
        assert set(report) == {"trace", "policy", "warnings", "reclaims", "holds", "summary", "score",
                               "baselines", "by_rule"}
        assert report["summary"]["reclaims"] == len(report["reclaims"])
        assert report["summary"]["warnings"] == len(report["warnings"])
        for r in report["reclaims"]:
            t = dt.datetime.fromisoformat(r["t"])
            assert any(w["session"] == r["session"]
                       and t - dt.datetime.fromisoformat(w["t"]) >= CFG.warning_lead
                       for w in report["warnings"]), r
        assert 0 <= report["summary"]["gpu_hours_freed"] <= report["summary"]["gpu_hours_held"]
        json.dumps(report)
        assert format_report(report).startswith("Trace: ")


@pytest.mark.skipif(not EXAMPLE.exists(), reason="../shared is not beside the clone")
def test_example_trace(tmp_path):
    report = backtest(EXAMPLE)
    assert report["trace"] == {"sessions": 12, "start": "2026-11-02T08:00:00Z", "end": "2026-11-03T00:00:00Z"}
    assert report["score"]["reclaimable_gpu_hours"] > 0
    culler = report["baselines"]["idle-culler"]
    assert culler["false_reclaims"] >= report["score"]["false_reclaims"]


# --------------------------------------------------------------------------- config and CLI


def test_policy_overrides(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text('{"gpu_idle_threshold": 9, "idle_reclaim_after": "2h30m", "warning_lead": 600,'
                    ' "exempt_users": ["alice"], "pressure_only": true}')
    cfg = load_policy_config(path)
    assert cfg.gpu_idle_threshold == 9.0
    assert cfg.idle_reclaim_after == dt.timedelta(hours=2, minutes=30)
    assert cfg.warning_lead == dt.timedelta(minutes=10)
    assert cfg.exempt_users == frozenset({"alice"}) and cfg.pressure_only is True
    path.write_text("idle_reclaim_after: 3h\nmax_age: null\n")
    assert load_policy_config(path).idle_reclaim_after == dt.timedelta(hours=3)
    path.write_text('{"gpu_idle_treshold": 9}')
    with pytest.raises(ConfigError, match="unknown policy setting gpu_idle_treshold"):
        load_policy_config(path)
    path.write_text('{"idle_reclaim_after": "soon"}')
    with pytest.raises(ConfigError, match="idle_reclaim_after: not a duration"):
        load_policy_config(path)
    assert parse_duration("30m") == dt.timedelta(minutes=30)
    assert parse_duration(90) == dt.timedelta(seconds=90)
    assert parse_duration("1d") == dt.timedelta(days=1)


def test_cli_json(tmp_path):
    trace = (Trace(hours=6).session("alice/", sample=idle_open_tab())
             .label("alice/", 0, 360, "reclaimable")).write(tmp_path / "t.jsonl")
    proc = cli("--trace", str(trace), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["reclaims"] == 1
    assert report["policy"]["warning_lead"] == CFG.warning_lead.total_seconds()
    conf = tmp_path / "c.json"
    conf.write_text('{"never_used_warn_after": "3h", "never_used_reclaim_after": "4h"}')
    proc = cli("--trace", str(trace), "--config", str(conf), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["policy"]["never_used_reclaim_after"] == 4 * 3600
    assert report["reclaims"][0]["t"] >= ts(at(240))
    text = cli("--trace", str(trace))
    assert text.returncode == 0 and "Reclaims: 1" in text.stdout and "Baseline idle-culler" in text.stdout


def test_cli_bad_trace_and_bad_config(tmp_path):
    trace = Trace(hours=1).session("alice/", sample=idle_open_tab()).write(tmp_path / "t.jsonl")
    lines = trace.read_text().splitlines()
    bad = json.loads(lines[3])
    bad["gpu_util"] = [1, 2]
    lines[3] = json.dumps(bad)
    trace.write_text("\n".join(lines) + "\n")
    proc = cli("--trace", str(trace), "--json")
    assert proc.returncode == 2
    assert f"{trace}:4: sample: gpu_util has 2 values, the session has 1 GPU" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    conf = tmp_path / "c.json"
    conf.write_text('{"nope": 1}')
    good = Trace(hours=1).session("alice/", sample=idle_open_tab()).write(tmp_path / "g.jsonl")
    proc = cli("--trace", str(good), "--config", str(conf))
    assert proc.returncode == 2 and "unknown policy setting nope" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = cli("--trace", str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr
