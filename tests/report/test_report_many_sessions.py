"""A month's sessions outnumber what the report holds at once (issue 36): with z2jh's pod names
each session is a pod of its own (kube-state-metrics 2: a uid each), so the hub users' pod list
of a whole window grows with the sessions. The report lists them a day at a time and keeps a
user a pod name: here five days of four users a day, 20 pod series in the window, read under
--max-series 15 (the GPU series, 12, within it), on Debian's Prometheus; every figure counted
here from the sessions written."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import time

import pytest

from jupyterhub_gpu_reclaim.cli import main
from tests.support.messy_history import Pod, write_history
from tests.support.prometheus_history import create_blocks, history_prometheus
from tests.support.report_history import Device, Scheme

DAY = 86400
DAYS = 5
START = (int(time.time()) // DAY - DAYS - 2) * DAY
DEVICES = [Device("node-a", str(i), f"GPU-a{i}000000-0000-0000-0000-000000000000") for i in range(2)]
USERS = ["ann", "ben", "cat", "dan"]  # two a GPU, one after the other, every day
SESSION_H = 4
MAX_SERIES = 15


def _used(h: float) -> float:
    return 80.0


PODS = [Pod(f"jupyter-{user}", f"uid-{user}-{day}", user, DEVICES[i // 2],
            (day * 24 + 1 + (i % 2) * (SESSION_H + 1), day * 24 + 1 + (i % 2) * (SESSION_H + 1) + SESSION_H),
            _used, profile="small")
        for day in range(DAYS) for i, user in enumerate(USERS)]


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("many-sessions")
    with open(workdir / "history.om", "w") as out:
        write_history(out, START, Scheme(False, "2"), PODS, DAYS * 24 + 2)
    create_blocks(workdir / "history.om", workdir / "data")
    out, err = io.StringIO(), io.StringIO()
    with history_prometheus(workdir) as url, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as done:
            main(["report", "--prometheus-url", url, "--since", iso(START), "--until", iso(START + DAYS * DAY),
                  "--max-series", str(MAX_SERIES), "--json"])
    assert done.value.code == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_more_sessions_in_the_window_than_the_bound_are_read_a_day_at_a_time(report):
    assert len(PODS) > MAX_SERIES  # the window's pod list would be refused whole
    by_user = {r["user"]: r for r in report["by_user"]}
    assert sorted(by_user) == sorted(USERS)
    for user in USERS:
        assert by_user[user]["held"] == pytest.approx(DAYS * SESSION_H, abs=0.05)
        assert by_user[user]["used"] == pytest.approx(DAYS * SESSION_H, abs=0.05)
    assert {r["profile"] for r in report["rows"]} == {"small"}
    assert len(report["by_day"]) == DAYS
