"""The estimate on timelines as timelines.Timelines builds them (their sessions as sessions.py
makes them), and the report's names written safely: a step a minute, codes as history writes
them."""

from __future__ import annotations

import csv
import io
import re

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.report.estimate import Estimate, estimate
from jupyterhub_gpu_reclaim.report.timelines import ABSENT, IDLE, NO_VALUE, USED, GpuTimeline
from jupyterhub_gpu_reclaim.report.formats import as_csv, as_text
from jupyterhub_gpu_reclaim.report.sessions import PodFacts, sessions

STEP = 60
POD = ("jhub", "jupyter-alice")
STALE = int(PolicyConfig().stale_after.total_seconds() // STEP)


def line(gpu: str, codes: bytes, pod=POD) -> GpuTimeline:
    timeline = GpuTimeline(pod, gpu, "node-a")
    for m in re.finditer(rb"[^\x00]+", codes):
        timeline.write(m.start(), m.group())
    return timeline


def estimated(lines: dict, steps: int) -> Estimate:
    return estimate(sessions(lines, PodFacts(), STALE), steps, STEP)


def steps(*runs: tuple[int, int]) -> bytes:
    return b"".join(bytes([code]) * n for code, n in runs)


def test_a_pod_name_back_on_another_gpu_is_one_session_at_a_time():
    # z2jh names alice's pod alike each time: first on GPU 0 (used 1 h, idle 5 h, gone),
    # then on GPU 3 (idle 3 h, gone): each stretch freed from 2 h into it, one GPU each
    first = steps((USED, 60), (IDLE, 300), (ABSENT, 400))
    second = steps((ABSENT, 400), (IDLE, 180), (ABSENT, 180))
    assert len(first) == len(second)
    e = estimated({1: line("0", first), 2: line("3", second)}, len(first))
    assert e.reclaims == 2 and e.gpu_hours_freed == (300 - 120 + 180 - 120) / 60


def test_a_pod_whose_last_minutes_have_no_reading_still_ended():
    # kube-state-metrics shows the pod Running 2 min after the exporter's last reading of it
    e = estimated({1: line("0", steps((USED, 60), (IDLE, 300), (NO_VALUE, 2), (ABSENT, 100)))}, 462)
    assert e.reclaims == 1 and e.gpu_hours_freed == (300 - 120) / 60


def test_what_the_history_cannot_show_is_not_counted():
    timelines = {
        # used again after 3 h idle: a reclaim would have interrupted someone
        1: line("0", steps((USED, 30), (IDLE, 180), (USED, 30), (ABSENT, 10)), ("jhub", "a")),
        # a missing reading after 3 h idle: the policy would have held; unknown
        2: line("1", steps((USED, 30), (IDLE, 180), (NO_VALUE, 30), (ABSENT, 10)), ("jhub", "b")),
        # still idle when the window ends
        3: line("2", steps((ABSENT, 10), (USED, 30), (IDLE, 210)), ("jhub", "c")),
        # a short gap (under stale_after) and back: the idle clock starts again, nothing ends
        4: line("3", steps((USED, 30), (IDLE, 100), (ABSENT, 3), (IDLE, 100), (USED, 17)), ("jhub", "d")),
    }
    e = estimated(timelines, 250)
    assert (e.reclaims, e.gpu_hours_freed, e.interruptions) == (0, 0.0, 1)
    assert e.gpu_hours_idle_at_end == (210 - 120) / 60


def test_a_time_sliced_gpu_is_left_out():
    shared = line("0", steps((IDLE, 300), (ABSENT, 10)))
    shared.vgpu = True
    e = estimated({1: shared}, 310)
    assert (e.reclaims, e.gpu_hours_freed, e.shared_left_out) == (0, 0.0, 1)


def _report(user: str, group: str) -> dict:
    hours = {"held": 1.0, "used": 0.5, "idle": 0.5, "idle_long": 0.0, "no_reading": 0.0}
    return {
        "source": {"prometheus": "http://p", "groups": "the hub"}, "idle_threshold_percent": 1.0, "long_idle_h": 2.0,
        "window": {"since": "2026-12-01T00:00:00Z", "until": "2026-12-02T00:00:00Z", "step_s": 60},
        "totals": hours, "by_user": [{"user": user, "groups": [group], **hours}], "by_group": [], "by_profile": [],
        "by_day": [], "rows": [{"day": "2026-12-01", "user": user, "groups": [group], "profile": "-x", **hours}],
        "queue": {"waits": 0, "pods": 0, "hours_waited": 0.0, "gpu_hours_waited": 0.0, "median_wait_h": 0.0,
                  "longest_wait_h": 0.0, "starting": {"waits": 0, "pods": 0, "hours_waited": 0.0,
                                                      "median_wait_h": 0.0, "longest_wait_h": 0.0}},
        "policy_estimate": {"policy": "the default policy", "gpu_hours_freed": 0.0, "reclaims": 0, "would_have_interrupted": 0,
                            "gpu_hours_idle_at_end_not_counted": 0.0, "pods_on_time_sliced_gpus_left_out": 0,
                            "assumed": []},
        "notes": [],
    }


def test_names_are_written_as_text_not_formulas_or_lines():
    report = _report("=HYPERLINK(\"http://x\")", "@group\r\nforged")
    (_, row) = csv.reader(io.StringIO(as_csv(report)))
    assert row[1:4] == ["'=HYPERLINK(\"http://x\")", "'@group\r\nforged", "'-x"]
    text = as_text(report)
    assert "\\r\\nforged" in text and "\nforged" not in text


def test_a_pod_seen_every_other_step_is_one_stretch_and_a_gap_longer_than_join_another():
    # a scrape interval of twice the step: one stretch with ABSENT between, not 500 stretches
    timeline = GpuTimeline(POD, "0", "node-a")
    for i in range(0, 1000, 2):
        timeline.write(i, bytes([IDLE]), join=1)
    timeline.write(1010, bytes([USED]), join=1)
    assert [first for first, _ in timeline.chunks] == [0, 1010]
    assert [i for i, code in timeline.steps() if code] == [*range(0, 1000, 2), 1010]


def test_the_queue_and_the_estimate_say_durations_in_words():
    """As the totals and the tables do (durations.format_hours): "1 h 30 min", not "1.50 h"."""
    report = _report("alice", "g")
    report["queue"].update(waits=2, pods=1, hours_waited=1.5, gpu_hours_waited=3.0, median_wait_h=0.75,
                           longest_wait_h=1.0)
    report["queue"]["starting"].update(waits=1, pods=1, hours_waited=0.1, longest_wait_h=0.1)
    report["policy_estimate"].update(gpu_hours_freed=12.5, reclaims=2, gpu_hours_idle_at_end_not_counted=0.25)
    text = as_text(report)
    assert ("GPU queue: 2 waits of 1 pod for a GPU (unschedulable), 1 h 30 min in all (3 h of GPU time asked for), "
            "median 45 min, longest 1 h; 1 start of 1 pod once scheduled (image pull, container start), 6 min in all, "
            "longest 6 min.") in text
    assert ("Estimate: the default policy would have freed about 12 h 30 min of GPU time (2 reclaims); 0 reclaims "
            "would have interrupted someone who used the GPU again (not counted); GPU time still idle at the end "
            "(15 min) is not counted; 0 pods on time-sliced GPUs left out.") in text
    assert not re.search(r"\d\.\d\d (h|GPU-hours)", text.split("GPU queue:")[1]), text
