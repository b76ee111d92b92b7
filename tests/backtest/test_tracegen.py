"""The trace generator (tracegen, `generate-trace`): its traces pass the reader, come out the
same for the same seed, and label each kind of session by the format's rules; the backtest
scores them per kind."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu_reclaim.replay.backtest import NO_SCENARIO, replay
from jupyterhub_gpu_reclaim.replay.backtest_report import format_report
from jupyterhub_gpu_reclaim.policy.observations import IntentChange, Pressure, SessionSample
from jupyterhub_gpu_reclaim.replay.trace import (
    Label,
    TraceConfig,
    TraceError,
    TraceSession,
    read_trace,
    write_trace,
)
from jupyterhub_gpu_reclaim.replay.tracegen import SCENARIOS, generate

REPO = Path(__file__).resolve().parents[2]
MIN = dt.timedelta(minutes=1)
# small enough to replay in a second or two, big enough for every kind (the mix has 14 slots)
SMALL = {"seed": 3, "hours": 30, "sessions": 28, "interval_s": 120}


def text(records) -> str:
    out = io.StringIO()
    write_trace(records, out)
    return out.getvalue()


@pytest.fixture(scope="module")
def trace() -> str:
    return text(generate(**SMALL))


@pytest.fixture(scope="module")
def parsed(trace):
    return list(read_trace(io.StringIO(trace), name="generated"))


class Session:
    """One generated session as read back: its line, samples, labels and intents."""

    def __init__(self, line: TraceSession, end: dt.datetime):
        self.line = line
        self.end = min(line.stopped, end) if line.stopped else end
        self.samples: list = []
        self.labels: list[Label] = []
        self.intents: list[IntentChange] = []

    @property
    def cut(self) -> bool:
        """The trace ends before the session (every generated session is stopped by its user)."""
        return self.line.stopped is None

    def truth_at(self, t: dt.datetime) -> str | None:
        found = [label.truth for label in self.labels if label.from_ <= t < label.to]
        assert len(found) <= 1, (self.line.id, t, found)
        return found[0] if found else None


@pytest.fixture(scope="module")
def sessions(parsed) -> dict[str, Session]:
    config = parsed[0]
    out: dict[str, Session] = {}
    for r in parsed[1:]:
        if isinstance(r, TraceSession):
            out[r.id] = Session(r, config.end)
        elif isinstance(r, SessionSample):
            out[r.session].samples.append(r.sample)
        elif isinstance(r, Label):
            out[r.session].labels.append(r)
        elif isinstance(r, IntentChange):
            out[r.session].intents.append(r)
    return out


def works(sample) -> bool:
    """The sample shows work: a GPU in use or a busy kernel."""
    return any(u and u >= 1 for u in sample.gpu_util or ()) or any(
        k.execution_state == "busy" for k in sample.kernels or ())


def test_the_reader_accepts_it_sorted_with_every_kind(parsed, trace):
    config = parsed[0]
    assert isinstance(config, TraceConfig) and config.version == 1 and config.sample_interval_s == 120
    assert config.end - config.start == dt.timedelta(hours=30)
    kinds = {r.scenario for r in parsed if isinstance(r, TraceSession)}
    assert kinds == set(SCENARIOS)
    assert sum(isinstance(r, TraceSession) for r in parsed) == 28
    assert any(isinstance(r, Pressure) and r.pending_gpus > 0 for r in parsed)
    # the scenario key is on the session lines, and the written text reads back the same
    lines = [json.loads(line) for line in trace.splitlines()]
    assert all(line["scenario"] in SCENARIOS for line in lines if line["kind"] == "session")
    assert text(parsed) == trace
    # peak GPUs held at once, as the config says
    assert config.gpus_total >= max(r.session.gpus for r in parsed if isinstance(r, TraceSession))


def test_same_seed_same_bytes_other_seed_other_trace(trace):
    assert text(generate(**SMALL)) == trace
    assert text(generate(**dict(SMALL, seed=4))) != trace


def test_labels_tile_each_session_without_overlap(sessions):
    for s in sessions.values():
        spans = sorted((label.from_, label.to) for label in s.labels)
        assert spans[0][0] == s.line.t and spans[-1][1] == s.end, s.line.id
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)), (s.line.id, spans)


def test_work_is_must_keep_and_reclaimable_means_nothing_runs(sessions):
    for s in sessions.values():
        kind = s.line.scenario
        for m in s.samples:
            truth = s.truth_at(m.t)
            if works(m) and kind != "cpu-only":
                assert truth == "must_keep", (s.line.id, kind, m)
            if truth == "reclaimable" and kind != "cpu-only":
                assert not works(m), (s.line.id, kind, m)
            if m.gpu_util is None:  # the data needed to judge was missing
                assert truth == "must_keep" and kind == "metrics-outage", (s.line.id, m)
        if "gray" in {label.truth for label in s.labels}:  # a pause of 2 h or more, the user back
            assert kind in ("training-return", "late-start", "long-job-return"), s.line.id


def test_cpu_only_never_touches_the_gpu_and_is_reclaimable_after_an_hour(sessions):
    cpu = [s for s in sessions.values() if s.line.scenario == "cpu-only"]
    assert cpu
    for s in cpu:
        assert all(m.gpu_util == (0.0,) * s.line.session.gpus for m in s.samples)
        assert all(m.gpu_mem_used_mib == (0.0,) * s.line.session.gpus for m in s.samples)
        assert any(k.execution_state == "busy" for m in s.samples for k in m.kernels)
        assert s.truth_at(s.line.t + 59 * MIN) == "must_keep"
        assert s.truth_at(s.line.t + 60 * MIN) == "reclaimable"


def idle_stretches(s: Session) -> list[tuple[dt.datetime, dt.datetime]]:
    """(last work before, first work after) of each pause of more than 30 min with work on both sides."""
    times = [m.t for m in s.samples if works(m)]
    return [(a, b) for a, b in zip(times, times[1:], strict=False) if b - a > 30 * MIN]


def test_lunch_breaks_are_kept_up_to_the_return(sessions):
    lunch = [s for s in sessions.values() if s.line.scenario == "lunch-break"]
    assert lunch
    for s in lunch:
        pauses = [(a, b) for a, b in idle_stretches(s) if b - a >= 60 * MIN]
        if not pauses and s.cut:
            continue
        assert len(pauses) == 1, (s.line.id, pauses)
        left, back = pauses[0]
        assert back - left < 2 * dt.timedelta(hours=1)
        t = left
        while t <= back:
            assert s.truth_at(t) == "must_keep", (s.line.id, t)
            t += MIN


def test_training_return_is_gray_while_away_for_over_two_hours(sessions):
    for s in (s for s in sessions.values() if s.line.scenario == "training-return"):
        gray = [label for label in s.labels if label.truth == "gray"]
        if not gray and s.cut:  # the trace ends before the user is away
            continue
        assert len(gray) == 1
        if gray[0].to == s.end and s.cut:  # the trace ends before the user is back
            continue
        (left, back), = [(a, b) for a, b in idle_stretches(s) if b - a > dt.timedelta(hours=2)]
        # on the labels' minutes; the samples every 2 min
        assert left < gray[0].from_ <= left + 2 * MIN and back - 2 * MIN < gray[0].to <= back


def test_intents_are_must_keep_until_they_end(sessions):
    for kind in ("intent-back", "intent-expired"):
        group = [s for s in sessions.values() if s.line.scenario == kind]
        assert group
        for s in group:
            assert len(s.intents) == 1
            intent = s.intents[0]
            assert intent.until - intent.t <= dt.timedelta(hours=12)  # under the default max_keepalive
            assert s.truth_at(intent.t) == s.truth_at(min(intent.until, s.end) - MIN) == "must_keep"
            after = s.truth_at(intent.until)
            if kind == "intent-expired" and intent.until < s.end:
                assert after == "reclaimable"
                assert not any(works(m) for m in s.samples if m.t >= intent.t)


def test_outage_is_must_keep_with_idleness_on_both_sides(sessions):
    group = [s for s in sessions.values() if s.line.scenario == "metrics-outage"]
    assert group
    for s in group:
        missing = [m.t for m in s.samples if m.gpu_util is None]
        if not missing and s.cut:
            continue
        assert missing
        before = [m for m in s.samples if m.t < missing[0]][-1]
        assert not works(before) and s.truth_at(before.t) == "reclaimable"
        after = [m for m in s.samples if m.t > missing[-1]]
        if after:
            assert not works(after[0]) and s.truth_at(after[0].t) == "reclaimable"


def test_slow_loaders_and_partial_multi_gpu_keep_working(sessions):
    loaders = [s for s in sessions.values() if s.line.scenario == "slow-loader"]
    assert loaders
    for s in loaders:
        low = [m for m in s.samples if m.gpu_util and all(3 <= u <= 8 for u in m.gpu_util)]
        assert len(low) >= 60  # two hours at least, every 2 min
        assert all(s.truth_at(m.t) == "must_keep" for m in low)
    multi = [s for s in sessions.values() if s.line.scenario == "multi-gpu-partial"]
    assert multi
    for s in multi:
        assert s.line.session.gpus >= 2
        partial = [m for m in s.samples if m.gpu_util and 0 < sum(u >= 70 for u in m.gpu_util) < len(m.gpu_util)
                   and min(m.gpu_util) == 0]
        assert partial and all(s.truth_at(m.t) == "must_keep" for m in partial)


def test_per_kind_breakdown_sums_to_the_totals(parsed):
    report = replay(iter(parsed))
    kinds = report["scenarios"]
    assert set(kinds) == set(SCENARIOS)
    assert sum(k["sessions"] for k in kinds.values()) == report["trace"]["sessions"]
    score = report["score"]
    for name in ("policy", "idle-culler", "zero-gpu-2h"):
        total = score if name == "policy" else report["baselines"][name]
        rows = [k[name] for k in kinds.values()]
        reclaims = report["summary"]["reclaims"] if name == "policy" else total["reclaims"]
        assert sum(r["reclaims"] for r in rows) == reclaims
        for key in ("false_reclaims", "unwarned_reclaims", "gray_reclaims"):
            assert sum(r[key] for r in rows) == total[key], (name, key)
        assert sum(r["reclaimable_gpu_hours_recovered"] for r in rows) == pytest.approx(
            total["reclaimable_gpu_hours_recovered"], abs=1e-4)
        assert sum(r["reclaimable_gpu_hours"] for r in rows) == pytest.approx(score["reclaimable_gpu_hours"], abs=1e-4)
    # the reference rules never warn; the policy always does before it reclaims
    assert score["unwarned_reclaims"] == 0 and report["summary"]["reclaims"] > 0
    for name in ("idle-culler", "zero-gpu-2h"):
        assert report["baselines"][name]["unwarned_reclaims"] == report["baselines"][name]["reclaims"]
    table = format_report(report)
    assert "Per scenario" in table
    assert all(f"  {kind} " in table for kind in SCENARIOS)


def test_no_breakdown_without_the_kind_key(parsed):
    plain = [TraceSession(r.session, r.stopped) if isinstance(r, TraceSession) else r for r in parsed]
    report = replay(iter(plain))
    assert "scenarios" not in report and "Per scenario" not in format_report(report)
    # one session without it: its own row, so the kinds still add up
    first = next(i for i, r in enumerate(parsed) if isinstance(r, TraceSession))
    mixed = parsed[:first] + [plain[first]] + parsed[first + 1:]
    kinds = replay(iter(mixed))["scenarios"]
    assert kinds[NO_SCENARIO]["sessions"] == 1 and sum(k["sessions"] for k in kinds.values()) == 28


def test_scenario_must_be_a_string():
    lines = ['{"kind":"config","version":1,"start":"2026-11-02T08:00:00Z","end":"2026-11-02T09:00:00Z",'
             '"sample_interval_s":60,"gpus_total":1}',
             '{"kind":"session","id":"a/","user":"a","server":"","gpus":1,"started":"2026-11-02T08:00:00Z",'
             '"scenario":7}']
    with pytest.raises(TraceError, match="t:2: session: scenario must be a string, not 7"):
        list(read_trace(lines, name="t"))


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu_reclaim", "generate-trace", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_writes_the_trace_and_backtest_scores_it_per_kind(tmp_path):
    out = tmp_path / "t.jsonl"
    proc = cli("--seed", "3", "--hours", "30", "--sessions", "28", "--interval", "120", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == text(generate(**SMALL))
    proc = subprocess.run([sys.executable, "-m", "jupyterhub_gpu_reclaim", "backtest", "--trace", str(out),
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["scenarios"]) == set(SCENARIOS)
    assert {"false_reclaims", "unwarned_reclaims", "recovered_share"} <= set(report["score"])


@pytest.mark.parametrize("args, message", [
    (["--hours", "0"], "--hours 0: must be more than 0"),
    (["--hours", "nan"], "--hours nan: must be more than 0"),
    (["--sessions", "0"], "--sessions 0: must be from 1"),
    (["--seed", "-1"], "--seed -1: must be 0 or more"),
    (["--interval", "600"], "--interval 600: must be from 10 to 300 seconds"),
    (["--start", "2026-11-02T08:00:00"], "not an RFC 3339 time with an offset"),
    (["--hours", "many"], "argument --hours: invalid float value: 'many'"),
])
def test_cli_bad_arguments_exit_2_and_write_nothing(tmp_path, args, message):
    out = tmp_path / "t.jsonl"
    proc = cli(*args, "--out", str(out))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_unwritable_out_is_refused(tmp_path):
    proc = cli("--hours", "2", "--sessions", "2", "--out", str(tmp_path / "missing" / "t.jsonl"))
    assert proc.returncode == 2 and "cannot write: No such file or directory" in proc.stderr
    proc = cli("--hours", "2", "--sessions", "2", "--out", str(tmp_path))
    assert proc.returncode == 2 and "is a folder" in proc.stderr
    assert list(tmp_path.iterdir()) == []
