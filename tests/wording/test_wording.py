"""The words said in more than one place: the notices and the pages say the same."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.service.notify import Message
from jupyterhub_gpu_reclaim.policy.evidence import Measured
from jupyterhub_gpu_reclaim.policy.observations import Decision, Session
from jupyterhub_gpu_reclaim.store.reclaims import ReclaimRecord
from jupyterhub_gpu_reclaim.web.render import _jinja, reclaim_json, sparkline
from jupyterhub_gpu_reclaim.wording import KEEPS, LOSES, count, format_util, plural, server_name

from ..support.clock import at

NOW = at(hours=6)  # 14:00 UTC


def test_counts_have_their_plural():
    assert [count(n, "GPU") for n in (0, 1, 2, 1.5, 0.25)] == ["0 GPUs", "1 GPU", "2 GPUs", "1.5 GPUs", "0.25 GPUs"]
    assert count(1, "spawn") == "1 spawn" and count(3, "GPU-hour") == "3 GPU-hours"
    assert (plural(1, "reclaim"), plural(7, "reclaim")) == ("reclaim", "reclaims")
    assert count(123456789, "GPU-hour") == "123456789 GPU-hours"


def test_format_util():
    assert format_util(37) == "37 %" and format_util(4.56) == "4.6 %" and format_util(0.0) == "0 %"
    assert format_util([4.5, None, 100]) == "4.5 % / no data / 100 %"
    assert format_util(None) == format_util([]) == "no data"
    assert format_util([None, 3], missing="–") == "– / 3 %"
    assert format_util(["x"]) == "x"  # evidence read back as JSON is shown, never a crash


def test_a_server_is_named_as_the_hub_names_it():
    assert server_name("alice/") == "alice"  # the default server: never "alice/"
    assert server_name("alice/gpu") == "alice/gpu"


def test_notices_and_pages_say_the_same():
    session = Session("alice/", "alice", "", 1, NOW - dt.timedelta(hours=3))
    d = Decision("alice/", "reclaim", "gpu-idle", "idle", reclaim_at=NOW,
                 measured=Measured(window_max_util=(2.5,), latest_util=(0.0,)))
    text = Message.build(d, session, keepalive_url="", now=NOW).text
    assert f"Kept: {KEEPS}." in text and f"Lost: {LOSES}." in text
    assert f"highest GPU utilization: {format_util([2.5])}" in text
    record = ReclaimRecord(1, "alice/", "ep", "gpu-idle", NOW, 1, {}, NOW, "stopped", "")
    assert reclaim_json(record, NOW)["kept"] == KEEPS and reclaim_json(record, NOW)["lost"] == LOSES
    assert _jinja.filters["util"]([2.5, None]) == "2.5 % / –"
    assert "latest 2.5 %" in sparkline([1.0, 2.5])


def test_gpu_time_and_settings_read_in_words():
    from jupyterhub_gpu_reclaim.durations import format_exact, format_hours

    # the report's GPU time: never "0.10" for 6 min; hours beyond a day (GPU time is counted in them)
    assert [format_hours(h) for h in (0.1, 0, None, 2.5, 0.004, 30, 312.25)] == [
        "6 min", "0", "0", "2 h 30 min", "14 s", "30 h", "312 h 15 min"]
    # a setting as it was set, nothing rounded away (the what-if echoes "3m" so)
    assert [format_exact(s) for s in (180, 90, 0, 0.5, 90000, 7200)] == [
        "3 min", "1 min 30 s", "0 s", "0.5 s", "1 d 1 h", "2 h"]
