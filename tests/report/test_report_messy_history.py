"""The usage report on history with the mess real clusters write (tests/support/messy_history.py:
reused pod names with other profiles, request series that gain `node` or change `instance`,
an exporter outage while the pod runs, hand-overs within a step, a time-sliced GPU known by
the resource asked for, waits for a GPU and starts), in Debian's Prometheus, with each
honorLabels scheme. Every figure is counted here from the samples the history wrote, step by
step (a step at t reads (t - 60 s, t]), without the report's code."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import math
import re
import time

import pytest

from jupyterhub_gpu_reclaim.cli import main
from tests.support.messy_history import PODS, Pod, exporter_times, times, write_history
from tests.support.prometheus_history import create_blocks, history_prometheus
from tests.support.report_history import HOUR, Scheme

STEP = 60
DAY = 86400
START = (int(time.time()) // DAY - 3) * DAY
STEPS = DAY // STEP  # the report's steps: (START, START + 60 s] ... (START + 24 h - 60 s, START + 24 h]
LONG = 2 * HOUR // STEP  # the policy's 2 h, in steps
SCHEMES = {"honorlabels-false": Scheme(False, "2"), "honorlabels-true": Scheme(True, "2")}


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def report(request, tmp_path_factory):
    """The report's JSON of the day from START to midnight."""
    workdir = tmp_path_factory.mktemp(request.param)
    with open(workdir / "history.om", "w") as out:
        write_history(out, START, SCHEMES[request.param])
    create_blocks(workdir / "history.om", workdir / "data")
    out, err = io.StringIO(), io.StringIO()
    with history_prometheus(workdir) as url, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as done:
            main(["report", "--prometheus-url", url, "--since", iso(START), "--until", iso(START + DAY), "--json"])
    assert done.value.code == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.fixture
def got(report):
    return report


def step_of(t: float) -> int:
    """The step whose (t_i - 60 s, t_i] holds t: 1 to STEPS in the report."""
    return math.ceil((t - START) / STEP)


def codes(p: Pod) -> dict[int, str]:
    """Each step the pod held its GPU: "u" used (a sample at 1 % or more), "i" idle, "n" no
    reading (kube-state-metrics shows it Running, no exporter sample)."""
    out: dict[int, str] = {}
    for t in times(START, *p.run):  # Running: kube-state-metrics' samples
        out[step_of(t)] = "n"
    for t in exporter_times(START, p):
        i = step_of(t)
        out[i] = "u" if p.util((t - START) / HOUR) >= 1 or out.get(i) == "u" else "i"
    return {i: c for i, c in out.items() if 1 <= i <= STEPS}


def hours(p: Pod) -> dict[str, float]:
    line = codes(p)
    text = "".join(line.get(i, ".") for i in range(1, STEPS + 1))
    long_idle = sum(len(m.group()) for m in re.finditer("i{%d,}" % LONG, text))
    return {"held": len(line) / 60, "used": text.count("u") / 60, "idle": text.count("i") / 60,
            "no_reading": text.count("n") / 60, "idle_long": long_idle / 60}


def by(key) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for p in PODS:
        row = out.setdefault(key(p), dict.fromkeys(("held", "used", "idle", "no_reading", "idle_long"), 0.0))
        for k, v in hours(p).items():
            row[k] += v
    return {name: {k: round(v, 2) for k, v in row.items()} for name, row in out.items() if row["held"]}


def table(got: dict, name: str) -> dict[str, dict[str, float]]:
    return {r[name]: {k: r[k] for k in ("held", "used", "idle", "no_reading", "idle_long")} for r in got[f"by_{name}"]}


def test_an_exporter_outage_while_the_pod_runs_is_held_with_no_reading(got):
    (dave,) = [p for p in PODS if p.outage]
    assert table(got, "user")["dave"] == by(lambda p: p.user)["dave"]
    assert table(got, "user")["dave"]["no_reading"] == pytest.approx(0.5, abs=0.02)
    assert table(got, "user")["dave"]["held"] == pytest.approx(dave.run[1] - dave.run[0], abs=0.02)


def test_a_profile_belongs_to_the_pod_instance_not_its_name(got):
    # jupyter-alice: two sessions "small" (3 h), one "large" (3 h), kube-state-metrics' uid each
    rows = {(r["user"], r["profile"]): r["held"] for r in got["rows"]}
    assert rows[("alice", "small")] == pytest.approx(3.0, abs=0.02)
    assert rows[("alice", "large")] == pytest.approx(3.0, abs=0.02)
    assert table(got, "profile") == by(lambda p: p.profile)


def test_every_figure_per_user_and_the_day_is_the_samples_own(got):
    assert table(got, "user") == by(lambda p: p.user)
    # --until at midnight: the day's last step is its last minute, no row of the next day
    day = dt.datetime.fromtimestamp(START, dt.timezone.utc).date().isoformat()
    assert {r["day"] for r in got["rows"]} == {day}
    assert table(got, "day") == by(lambda p: day)
    assert table(got, "user")["kim"]["held"] == pytest.approx(2.0, abs=0.02)  # 22:00 to midnight


def test_the_queue_tells_waiting_for_a_gpu_from_starting_and_counts_each_request_once(got):
    queue = got["queue"]
    gpu = [w.end - w.start for p in PODS for w in p.waits if w.unschedulable]
    starts = [w.end - w.start for p in PODS for w in p.waits if not w.unschedulable]
    # bob's request series gains `node` once scheduled; carol's changes `instance`: one GPU
    # each; bob's second pod, under the same name, 2 GPUs
    assert queue["waits"] == len(gpu) == 4 and queue["pods"] == 3  # pod names: bob, carol, frank
    assert queue["hours_waited"] == pytest.approx(sum(gpu), abs=0.05)
    gpu_hours = sum((w.end - w.start) * p.gpus for p in PODS for w in p.waits if w.unschedulable)
    assert gpu_hours == sum(gpu) + 1
    assert queue["gpu_hours_waited"] == pytest.approx(gpu_hours, abs=0.05)
    assert queue["longest_wait_h"] == pytest.approx(max(gpu), abs=0.02)
    assert queue["starting"]["waits"] == len(starts) == 3
    assert queue["starting"]["hours_waited"] == pytest.approx(sum(starts), abs=0.05)
    assert queue["starting"]["longest_wait_h"] == pytest.approx(max(starts), abs=0.02)


def test_hand_overs_within_a_step_are_no_time_slicing_and_a_shared_request_is(got):
    """erin's GPU goes to frank within a minute, free before and after (with honorLabels true
    the free GPU's series names the exporter's pod): neither is time-sliced; gina asked for
    nvidia.com/gpu.shared and is. Freed: each stretch that ended with its pod, from 2 h in."""
    freed, reclaims = 0, 0
    for p in PODS:
        if p.resource.endswith("_shared"):
            continue
        text = "".join(codes(p).get(i, ".") for i in range(1, STEPS + 1)).rstrip(".")
        if len(text) == STEPS:
            continue  # still held at the end: not counted
        idle = len(text) - len(text.rstrip("i"))
        if idle > LONG:
            freed, reclaims = freed + idle - LONG, reclaims + 1
    estimate = got["policy_estimate"]
    assert reclaims == 3  # alice's large session, erin, frank
    assert estimate["reclaims"] == reclaims and estimate["would_have_interrupted"] == 0
    assert estimate["gpu_hours_freed"] == pytest.approx(freed / 60, abs=0.02)
    assert estimate["pods_on_time_sliced_gpus_left_out"] == 1
