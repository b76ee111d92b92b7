"""The usage report against Debian's Prometheus holding two days of history in its TSDB
(written by promtool from series shaped as dcgm-exporter and kube-state-metrics write them and
as a scrape stores them: tests/support/report_history.py), in each label scheme; every figure
checked against the same samples computed here, step by step, without the report's code."""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import pytest

from jupyterhub_gpu_reclaim.cli import main
from tests.support.prometheus_history import create_blocks, history_prometheus
from tests.support.report_history import HOUR, HOURS, SCHEMES, SESSIONS, history_file, history_rows, step_states

STEP = 60
DAY = 86400
START = (int(time.time()) // DAY - 3) * DAY  # two whole UTC days, ending a day before today
N = HOURS * HOUR // STEP + 1  # the steps of [START, START + 48 h]
SINCE = dt.datetime.fromtimestamp(START, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
UNTIL = dt.datetime.fromtimestamp(START + HOURS * HOUR, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def prometheus(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(request.param)
    create_blocks(history_file(workdir, START, SCHEMES[request.param]), workdir / "data")
    with history_prometheus(workdir) as url:
        yield request.param, url


def report(capsys, url: str, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["report", "--prometheus-url", url, "--since", SINCE, "--until", UNTIL, *args])
    out, err = capsys.readouterr()
    return done.value.code, out, err


def day_of(i: int) -> str:
    return dt.datetime.fromtimestamp(START + i * STEP, dt.timezone.utc).date().isoformat()


def expected_rows(scheme: str) -> dict[tuple[str, str, str], dict[str, float]]:
    return history_rows(START, STEP, N, SCHEMES[scheme])


def test_the_figures_per_day_user_and_profile_are_the_samples_own(prometheus, capsys):
    scheme, url = prometheus
    code, out, err = report(capsys, url, "--json")
    assert code == 0, err
    got = json.loads(out)
    rows = {(r["day"], r["user"], r["profile"]): {k: r[k] for k in ("held", "used", "idle", "no_reading", "idle_long")}
            for r in got["rows"]}
    assert rows == expected_rows(scheme)
    # the sessions the label schemes make hard are all there: MIG (engine activity, GPU_UTIL 0),
    # a virtual GPU (per process, the device's own series not a holder), a time-sliced one
    users = {r["user"]: r for r in got["by_user"]}
    assert users["carol"]["used"] == pytest.approx(3.5, abs=0.02) and users["carol"]["idle"] == pytest.approx(0.5, abs=0.02)
    assert users["dave"]["held"] == pytest.approx(6.0, abs=0.02)
    assert users["erin"]["used"] == pytest.approx(2.0, abs=0.02)
    assert users["bob"]["used"] == 0 and users["bob"]["idle_long"] == pytest.approx(8.0, abs=0.02)
    # the free MIG instance (no pod; with honorLabels true, the exporter's own pod) holds nothing
    assert set(users) == {"alice", "bob", "carol", "dave", "erin", "grace", "(not a hub user's pod)"}
    days = {r["day"]: r["held"] for r in got["by_day"]}
    assert days == pytest.approx({day: sum(v["held"] for (d, _, _), v in expected_rows(scheme).items() if d == day)
                                  for day in (day_of(1), day_of(N - 2))}, abs=0.02)
    assert got["totals"]["held"] == pytest.approx(sum(days.values()), abs=0.05)


def test_the_queue_is_the_pods_pending_for_a_gpu(prometheus, capsys):
    _, url = prometheus
    code, out, err = report(capsys, url, "--json")
    assert code == 0, err
    queue = json.loads(out)["queue"]
    # grace waited 17:00-18:00 for one GPU (unschedulable), then 10 min for her image and
    # container (scheduled, still Pending): a wait for a GPU, and a start apart; henry's pod
    # asked for no GPU and is no wait for one
    (grace,) = [s for s in SESSIONS if s.user == "grace"]
    assert grace.pending is not None and grace.unschedulable
    waited = grace.unschedulable
    starting = grace.pending[1] - grace.pending[0] - grace.unschedulable
    assert queue["waits"] == 1 and queue["pods"] == 1
    assert queue["hours_waited"] == pytest.approx(waited, abs=0.02)
    assert queue["gpu_hours_waited"] == pytest.approx(waited, abs=0.02)
    assert queue["starting"]["waits"] == 1 and queue["starting"]["hours_waited"] == pytest.approx(starting, abs=0.02)
    assert queue["by_day"] == [{"day": day_of(1), **{k: v for k, v in queue.items() if k != "by_day"}}]


def test_the_policy_estimate_counts_only_what_the_history_shows_and_says_so(prometheus, capsys):
    _, url = prometheus
    code, out, err = report(capsys, url, "--json")
    assert code == 0, err
    estimate = json.loads(out)["policy_estimate"]
    states = step_states(START, STEP, N)
    # alice: used, then idle 10:00-18:00 until her pod ended; bob: never used for 8 h, then
    # ended: each freed from 2 h into the stretch on. dave's GPU was used again after 3 h idle:
    # a reclaim would have interrupted him. erin's GPU is time-sliced: left out.
    freed = 0.0
    for pod in ("jupyter-alice", "jupyter-bob"):
        idle = "".join("i" if x == "idle" else "." for x in states[pod]).rstrip(".")
        run = len(idle) - len(idle.rstrip("i"))
        freed += (run - 120) * STEP / HOUR
    assert estimate["estimate"] is True
    assert estimate["gpu_hours_freed"] == pytest.approx(freed, abs=0.02) and freed == pytest.approx(12, abs=0.05)
    assert estimate["reclaims"] == 2 and estimate["would_have_interrupted"] == 1
    assert estimate["pods_on_time_sliced_gpus_left_out"] == 1
    assert any("no kernel, terminal or browser activity" in a for a in estimate["assumed"])


def test_the_text_and_csv_reports(prometheus, capsys):
    scheme, url = prometheus
    code, text, err = report(capsys, url)
    assert code == 0, err
    assert "GPU time held" in text
    assert re.search(r"Estimate: the default policy would have freed about (11 h 5\d min|12 h( \d min)?) of GPU time ",
                     text), text
    assert re.search(r"^alice\s+10\.00\s+2\.00\s+8\.00\s+8\.00\s+0\.00$", text, re.M), text
    if SCHEMES[scheme].ksm == "1.9":
        assert "No profile is known for" in text
    code, csv_text, err = report(capsys, url, "--csv")
    assert code == 0, err
    lines = csv_text.splitlines()
    assert lines[0] == "day,user,groups,profile,gpu_hours_held,gpu_hours_used,gpu_hours_idle,gpu_hours_idle_long,gpu_hours_no_reading"
    assert len(lines) - 1 == len(expected_rows(scheme))


def test_small_pages_give_the_same_report(prometheus, capsys):
    """Pagination by time: pages of a few hundred steps add up to the one-page answer."""
    _, url = prometheus
    code, whole, err = report(capsys, url, "--json")
    assert code == 0, err
    code, paged, err = report(capsys, url, "--json", "--max-samples", "2000")
    assert code == 0, err
    a, b = json.loads(whole), json.loads(paged)
    assert b["source"]["queries"] > a["source"]["queries"] + 20
    for key in ("rows", "queue", "policy_estimate", "totals"):
        assert a[key] == b[key]


def test_too_many_series_is_a_clear_error(prometheus, capsys):
    _, url = prometheus
    code, out, err = report(capsys, url, "--max-series", "3")
    assert code == 1 and out == ""
    assert err.startswith("jupyterhub-gpu-reclaim report: ") and "more than --max-series 3" in err
    assert err.count("\n") == 1
