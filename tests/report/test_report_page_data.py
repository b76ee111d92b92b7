"""The admin page's usage report (web/usage_report.py) on a virtual clock: the figures of
the service's record (sessions written cycle by cycle into a real store, an outage, a GPU
without data, hostile names) and of Debian's Prometheus holding two days of history before
it (tests/support/report_history.py), each checked against the same samples computed in
tests/support without the product's code; the GPU queue and the GPU-hours freed per day
(the record's cycles and reclaims; Prometheus's queue and the policy estimate) computed
there too; each day's source; Prometheus not configured,
unreachable, or answering nothing in time (bounded, and the service's loop goes on)."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import socket
import time

import pytest

from jupyterhub_gpu_reclaim.policy.rules import PolicyRules
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.report.formats import as_csv, as_json
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.web import usage_report as page
from tests.support.prometheus_history import create_blocks, history_prometheus
from tests.support.report_history import HOUR, HOURS, SCHEMES, SESSIONS, history_file, history_rows, step_states
from tests.support.usage_record import (HOSTILE_GROUP, HOSTILE_PROFILE, HOSTILE_USER, UTC, Recorded, expected_rows,
                                        fill, reclaimed)

DAY = dt.timedelta(days=1)
NOW = dt.datetime(2026, 11, 10, 12, 0, 20, tzinfo=UTC)
SETTINGS = ServiceSettings(cull_every=60)
GAP = dt.timedelta(minutes=10)  # the record's samples count this long at most (2 cycles, 10 min at least)
LONG = 120  # idle_reclaim_after (2 h) in steps


def d(day: int, hour: float = 0) -> dt.datetime:
    return dt.datetime(2026, 11, day, tzinfo=UTC) + dt.timedelta(hours=hour)


def record(base: dt.datetime) -> list[Recorded]:
    """From `base` (a midnight) on: alice used 1 h then idle 4 h, stopped; a hostile name with
    2 GPUs (one at 50 %, one idle) over midnight and still running, the service down for an
    hour; carol's GPU without data; bob without a GPU."""
    at = lambda day, hour: base + day * DAY + dt.timedelta(hours=hour)  # noqa: E731
    return [
        Recorded("alice/", 1, at(0, 9), at(0, 14), lambda t: (90.0 if t < at(0, 10) else 0.0,), "a100",
                 frozenset({"physics"})),
        Recorded(f"{HOSTILE_USER}/x", 2, at(1, 22), None, lambda t: (50.0, 0.0), HOSTILE_PROFILE,
                 frozenset({HOSTILE_GROUP, "physics"}), outages=((at(2, 3), at(2, 4)),)),
        Recorded("carol/", 1, at(2, 6), at(2, 8), lambda t: (None,), "a100"),
        Recorded("bob/", 0, at(0, 9), None, lambda t: ()),
    ]


def waiting(t: dt.datetime) -> int:
    """GPUs pods waited for at a cycle: 2 from 10:00 to 11:30 on the 9th, 1 over its midnight."""
    return 2 if d(9, 10) <= t < d(9, 11.5) else 1 if d(9, 23.5) <= t < d(10, 0.5) else 0


RECLAIMS = [("alice/", d(8, 14), "stopped", 1), ("carol/", d(10, 8), "stopped", 1),
            (f"{HOSTILE_USER}/x", d(10, 9), "failed", 2)]  # a failed reclaim frees nothing


def hours(report: dict) -> dict[tuple[str, str, str], dict[str, float]]:
    return {(r["day"], r["user"], r["profile"]): {k: r[k] for k in ("held", "used", "idle", "no_reading", "idle_long")}
            for r in report["rows"]}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The record (only read by the tests: one for the module)."""
    with Store.open(tmp_path_factory.mktemp("record") / "reclaim.sqlite") as s:
        fill(s, record(d(8)), NOW, waiting)
        for reclaim in RECLAIMS:
            reclaimed(s, *reclaim)
        yield s


async def test_the_records_figures_are_its_samples_own(store):
    report = await page.usage_report(store, SETTINGS, NOW, 7)
    sessions = record(d(8))
    expected = expected_rows(sessions, d(8), NOW, 1.0, LONG, GAP)
    assert hours(report) == expected
    # what they say, checked by hand: alice held 5 h from 09:00 (no sample before 09:00:30),
    # used 1 h, then idle 4 h in one stretch
    assert expected[("2026-11-08", "alice", "a100")] == {"held": 5.0, "used": 1.0, "idle": 3.98, "no_reading": 0.02,
                                                         "idle_long": 3.98}
    # the outage from 03:00: 10 min on the last sample (02:59:30), then no reading from 03:10
    # to 04:00 (the next sample at 04:00:30), on each GPU
    assert expected[("2026-11-10", HOSTILE_USER, HOSTILE_PROFILE)]["no_reading"] == round(2 * 51 / 60, 2)
    assert expected[("2026-11-10", "carol", "a100")]["no_reading"] == 2.0
    # each day its source: the record from its first day on (no Prometheus configured)
    assert [(r["day"], r["source"]) for r in report["by_day"]] == (
        [(f"2026-11-0{i}", "none") for i in range(4, 8)] + [(f"2026-11-{i:02}", "record") for i in (8, 9, 10)])
    assert report["notes"] == [page.PROMETHEUS_NOT_SET]
    assert report["totals"]["held"] == pytest.approx(sum(v["held"] for v in expected.values()), abs=0.05)
    # groups as the hub gave them to the service; a user in two counts in both
    assert {r["group"]: r["held"] for r in report["by_group"]} == pytest.approx({
        "physics": sum(v["held"] for (_, u, _), v in expected.items() if u in ("alice", HOSTILE_USER)),
        HOSTILE_GROUP: sum(v["held"] for (_, u, _), v in expected.items() if u == HOSTILE_USER),
        "(no group)": sum(v["held"] for (_, u, _), v in expected.items() if u == "carol")}, abs=0.05)


async def test_the_records_queue_and_freed_are_its_cycles_and_reclaims(store):
    report = await page.usage_report(store, SETTINGS, NOW, 3)
    waited: dict[str, float] = {}
    freed: dict[str, float] = {}

    def per_day(into: dict[str, float], a: dt.datetime, b: dt.datetime, gpus: float) -> None:
        for start in (d(8), d(9), d(10)):
            part = (min(b, start + DAY) - max(a, start)) / dt.timedelta(hours=1)
            into[start.date().isoformat()] = into.get(start.date().isoformat(), 0.0) + gpus * max(0.0, part)

    # each cycle (a minute apart from bob's first at 09:00:30 on the 8th, none missed)
    # counts its waiting GPUs for its minute
    t = d(8, 9) + dt.timedelta(seconds=30)
    while t <= NOW:
        per_day(waited, t, min(t + dt.timedelta(seconds=60), NOW), waiting(t))
        t += dt.timedelta(seconds=60)
    # a stopped reclaim frees its GPUs for a day after its stop, up to now
    for _, stopped, outcome, gpus in RECLAIMS:
        if outcome == "stopped":
            per_day(freed, stopped, min(stopped + DAY, NOW), gpus)
    days = {r["day"]: r for r in report["by_day"]}
    assert {day: r["gpu_hours_waited"] for day, r in days.items()} == {k: round(v, 2) for k, v in waited.items()}
    assert {day: r["gpu_hours_freed"] for day, r in days.items()} == {k: round(v, 2) for k, v in freed.items()}
    # by hand: 3 h + 29.5 min waited on the 9th; alice's reclaim frees 10 h on the 8th, 14 on the 9th
    assert days["2026-11-09"]["gpu_hours_waited"] == round(3 + 29.5 / 60, 2) and freed["2026-11-08"] == 10.0
    # the record knows no per-pod waits, and its freed hours are no estimate
    assert all(r["waits"] is None and r["longest_wait_h"] is None and r["freed_is_estimate"] is False
               for r in days.values())
    assert report["recorded"] == {"gpu_hours_waited": round(sum(waited.values()), 2),
                                  "gpu_hours_freed": round(sum(freed.values()), 2)}
    assert report["queue"] is None and report["policy_estimate"] is None  # no Prometheus
    # the per-day CSV: the same figures, the command's column names
    lines = list(csv.DictReader(io.StringIO(page.days_csv(report))))
    assert [float(r["gpu_hours_waited"]) for r in lines] == [r["gpu_hours_waited"] for r in report["by_day"]]
    assert [float(r["gpu_hours_freed"]) for r in lines] == [r["gpu_hours_freed"] for r in report["by_day"]]
    assert [float(r["gpu_hours_held"]) for r in lines] == [r["held"] for r in report["by_day"]]


async def test_the_exports_carry_the_commands_columns_and_no_formula(store):
    report = await page.usage_report(store, SETTINGS, NOW, 3)
    rows = list(csv.reader(io.StringIO(as_csv(report, extra=("source",)))))
    assert rows[0] == ["day", "user", "groups", "profile", "gpu_hours_held", "gpu_hours_used", "gpu_hours_idle",
                       "gpu_hours_idle_long", "gpu_hours_no_reading", "source"]
    hostile = [r for r in rows if HOSTILE_USER in r[1]]
    assert hostile and all(r[1] == "'" + HOSTILE_USER and r[3] == "'" + HOSTILE_PROFILE for r in hostile)
    assert not [cell for r in rows[1:] for cell in r if cell.startswith(("=", "+", "-", "@"))]
    assert json.loads(as_json(report))["rows"] == report["rows"]


async def test_a_store_without_a_record_yet_has_empty_days(tmp_path):
    with Store.open(tmp_path / "empty.sqlite") as s:
        report = await page.usage_report(s, SETTINGS, NOW, 7)
    assert report["rows"] == [] and report["source"]["record"] is None
    assert [r["held"] for r in report["by_day"]] == [0.0] * 7 and report["notes"] == [page.PROMETHEUS_NOT_SET]


def test_a_period_beyond_the_bound_is_refused():
    with pytest.raises(ValueError, match="days: from 1 to 31"):
        page.Period(NOW, 32)


# ---- with Prometheus's history for the days before the record

SCHEME = "honorlabels-true_ksm-2"
START = (int(time.time()) // 86400 - 6) * 86400  # the history's two days; the record begins 2 days later
BASE = dt.datetime.fromtimestamp(START, UTC)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("history")
    create_blocks(history_file(workdir, START, SCHEMES[SCHEME]), workdir / "data")
    with history_prometheus(workdir) as url:
        yield url


@pytest.fixture(scope="module")
def later_store(tmp_path_factory):
    """The service installed at 06:00 two days after the history: its record from then."""
    with Store.open(tmp_path_factory.mktemp("later") / "reclaim.sqlite") as s:
        sessions = [r for r in record(BASE + 2 * DAY) if r.started >= BASE + 2 * DAY + dt.timedelta(hours=6)]
        fill(s, sessions, BASE + 5 * DAY)
        yield s, sessions


async def test_prometheus_gives_the_days_before_the_record(prometheus, later_store):
    store, sessions = later_store
    now = BASE + 4 * DAY + dt.timedelta(hours=12)
    settings = ServiceSettings(cull_every=60, prometheus_url=prometheus)
    report = await page.usage_report(store, settings, now, 7)
    # Prometheus holds the days before the record's first whole day (its first included);
    # the record the days from then
    whole = BASE + 3 * DAY
    expected = history_rows(START, 60, HOURS * 60 + 1, SCHEMES[SCHEME])
    for key, value in expected_rows(sessions, whole, now, 1.0, LONG, GAP).items():
        assert key not in expected
        expected[key] = value
    assert hours(report) == expected
    first = (now - 6 * DAY).date()
    assert [(r["day"], r["source"]) for r in report["by_day"]] == [
        ((first + dt.timedelta(days=i)).isoformat(), "prometheus" if first + dt.timedelta(days=i) < whole.date()
         else "record") for i in range(7)]
    assert report["source"]["prometheus"] == prometheus and report["source"]["record"]
    # Prometheus's days: the command's queue (grace waited for 1 GPU from 17:00 to 18:10 on the
    # history's first day) and its estimate, per day, labelled so
    days = {r["day"]: r for r in report["by_day"]}
    (grace,) = [s for s in SESSIONS if s.user == "grace"]
    assert grace.pending is not None
    waited = grace.unschedulable  # then 10 min starting: not waiting for a GPU
    starting = grace.pending[1] - grace.pending[0] - grace.unschedulable
    first_day = BASE.date().isoformat()
    assert days[first_day]["waits"] == 1 and days[first_day]["gpu_hours_waited"] == pytest.approx(waited, abs=0.02)
    assert days[first_day]["longest_wait_h"] == pytest.approx(waited, abs=0.02)
    assert days[first_day]["starts"] == 1 and days[first_day]["longest_start_h"] == pytest.approx(starting, abs=0.02)
    assert report["queue"]["waits"] == 1
    # the estimate: alice's and bob's stretches that ended with their pods, freed from 2 h in,
    # each step on the day its minute begins
    states = step_states(START, 60, HOURS * 60 + 1)
    freed: dict[str, float] = {}
    for pod in ("jupyter-alice", "jupyter-bob"):
        idle = "".join("i" if x == "idle" else "." for x in states[pod]).rstrip(".")
        run_start = len(idle.rstrip("i"))
        for i in range(run_start + LONG, len(idle)):
            day = dt.datetime.fromtimestamp(START + (i - 1) * 60, UTC).date().isoformat()  # reads (t - 60 s, t]
            freed[day] = freed.get(day, 0.0) + 60 / HOUR
    estimated = {day: r["gpu_hours_freed"] for day, r in days.items() if r["source"] == "prometheus"}
    assert estimated == pytest.approx({day: freed.get(day, 0.0) for day in estimated}, abs=0.02)
    assert freed[first_day] == pytest.approx(8, abs=0.05)  # alice 12:00-18:00, bob 22:00-24:00
    assert all(r["freed_is_estimate"] == (r["source"] == "prometheus") for r in days.values())
    assert all(r["waits"] is None for r in days.values() if r["source"] == "record")
    assert report["policy_estimate"]["estimate"] is True and report["policy_estimate"]["policy"] == page.LIVE_POLICY
    assert report["policy_estimate"]["gpu_hours_freed"] == pytest.approx(sum(freed.values()), abs=0.02)
    assert any("no kernel, terminal or browser activity" in a for a in report["policy_estimate"]["assumed"])
    # the history's notes: a pod of no hub user's, a profile unknown, a pod that asked for no GPU
    assert any("(not a hub user's pod)" in n for n in report["notes"]), report["notes"]
    # asked again: from the cache, the same
    assert await page.usage_report(store, settings, now, 7) == report


async def test_prometheus_unreachable_leaves_its_days_empty_and_the_record_whole(later_store):
    store, sessions = later_store
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed: nobody listens
    now = BASE + 4 * DAY + dt.timedelta(hours=12)
    settings = ServiceSettings(cull_every=60, prometheus_url=f"http://user:secret@127.0.0.1:{port}")
    report = await page.usage_report(store, settings, now, 7)
    # the record's first day, partly recorded, is the record's then
    assert hours(report) == expected_rows(sessions, BASE + 2 * DAY, now, 1.0, LONG, GAP)
    assert [r["source"] for r in report["by_day"]] == ["none"] * 4 + ["record"] * 3
    (note,) = report["notes"]
    assert note.startswith("Prometheus could not be read") and "secret" not in json.dumps(report), note


async def test_prometheus_answering_nothing_is_given_up_in_time_and_the_loop_goes_on(later_store, monkeypatch):
    store, _ = later_store
    monkeypatch.setattr(page, "PROMETHEUS_TIMEOUT", 1.0)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts, never answers
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        settings = ServiceSettings(cull_every=60, prometheus_url=f"http://127.0.0.1:{silent.getsockname()[1]}")
        report = await page.usage_report(store, settings, BASE + 4 * DAY, 7)
    finally:
        ticker.cancel()
        silent.close()
    (note,) = report["notes"]
    assert "no answer within 1 s" in note, note
    assert ticks > 1  # the loop ran other tasks meanwhile


async def test_the_live_threshold_decides_used(store):
    settings = ServiceSettings(cull_every=60, rules=PolicyRules(PolicyConfig(gpu_idle_threshold=60.0)))
    report = await page.usage_report(store, settings, NOW, 7)
    assert hours(report) == expected_rows(record(d(8)), d(8), NOW, 60.0, LONG, GAP)
    assert report["idle_threshold_percent"] == 60.0
