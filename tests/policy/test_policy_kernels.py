"""Unit tests of the pure reclaim policy on what the kernels say: a busy kernel keeps silent
work, a job that ended with nobody there is reclaimed on its own clock, CPU work on a GPU
never used is warned and reclaimed, and kernels the server did not report hold."""

from __future__ import annotations

import dataclasses

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Intent, Kernel, Sample, SessionView
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig

from ..support.clock import START, at
from ..support.policy_inputs import BUSY, IDLE, run, samples, session, warned
from ..support.policy_walk import walk_view


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
    assert d.measured.last_seen == at(5) and d.idle_since == at(245)
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
    assert d.measured.cpu_work_since == START
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
    assert d.measured.never_used is False
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
