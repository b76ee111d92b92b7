"""Traces for the backtest's tests: a generated one (generate_trace), the example one, a small
hand-written one (Trace), and the backtest's command line to run them through."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
from pathlib import Path

from .clock import START, at

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
EXAMPLE = SHARED / "traces" / "example.jsonl"


def ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_trace(path: Path, *, lines: int = 5000, seed: int = 1, interval_s: int = 60) -> int:
    """Write a realistic trace of `lines` lines (at least a few hundred): sessions that train (GPU busy, kernel
    busy, hub activity stale), open-tab idlers (GPU 0%, hub fresh), never-used GPUs, slow data
    loaders (3-8%), exporter gaps, multi-GPU sessions, intents, pressure every 15 min and labels.
    Returns the number of lines written."""
    rng = random.Random(seed)
    step = dt.timedelta(seconds=interval_s)
    n_sessions = max(6, lines // 300)  # ~360 lines each: more than needed, cut below
    # each session lives ~ 400 samples on average; the trace spans what that needs
    span_steps = 600
    start, end = START, START + span_steps * step
    events: list[tuple[dt.datetime, int, dict]] = []  # (time, order, obj)
    behaviours = ["train", "open-tab-idle", "never-used", "loader", "gaps", "work-then-leave"]
    for i in range(n_sessions):
        sid = f"u{i:03d}/"
        gpus = rng.choice([1, 1, 1, 2])
        begin = start + rng.randrange(0, span_steps // 3) * step
        life = rng.randrange(200, 560)
        stop = begin + life * step
        stopped = stop if stop < end else None
        last = stop if stop < end else end
        kind = behaviours[i % len(behaviours)]
        events.append((begin, 0, {"kind": "session", "id": sid, "user": sid[:-1], "server": "",
                                  "admin": False, "gpus": gpus, "profile": "a100",
                                  "started": ts(begin), "stopped": ts(stopped) if stopped else None}))
        work_until = begin + rng.randrange(30, 150) * step
        hub = begin
        kernel_last = begin
        t = begin
        while t < last:
            if kind == "train":
                util, state = [round(rng.uniform(70, 99), 1) for _ in range(gpus)], "busy"
                kernel_last = t
            elif kind == "open-tab-idle":
                util, state, hub = [0.0] * gpus, "idle", t
            elif kind == "never-used":
                util, state = [0.0] * gpus, "idle"
            elif kind == "loader":
                util, state = [round(rng.uniform(3, 8), 1) for _ in range(gpus)], "busy"
                kernel_last = hub = t
            elif kind == "gaps":
                util = None if rng.random() < 0.2 else [round(rng.uniform(40, 90), 1) for _ in range(gpus)]
                state, kernel_last, hub = "busy", t, t
            else:  # work-then-leave
                if t < work_until:
                    util, state = [round(rng.uniform(30, 90), 1) for _ in range(gpus)], "busy"
                    kernel_last = hub = t
                else:
                    util, state = [0.0] * gpus, "idle"
            events.append((t, 2, {
                "kind": "sample", "t": ts(t), "session": sid, "gpu_util": util,
                "gpu_mem_used_mib": [900] * gpus,
                "kernels": [{"execution_state": state, "last_activity": ts(kernel_last)}],
                "terminals": [], "hub_last_activity": ts(hub), "extra_key_ignored": 1,
            }))
            t += step
        if kind == "work-then-leave":
            events.append((begin, 1, {"kind": "label", "session": sid, "from": ts(begin),
                                      "to": ts(min(work_until, last)), "truth": "must_keep"}))
            if work_until < last:
                events.append((work_until, 1, {"kind": "label", "session": sid, "from": ts(work_until),
                                               "to": ts(last), "truth": "reclaimable"}))
        elif kind in ("open-tab-idle", "never-used"):
            events.append((begin, 1, {"kind": "label", "session": sid, "from": ts(begin),
                                      "to": ts(last), "truth": "reclaimable"}))
            if kind == "open-tab-idle" and i % 4 == 1:
                set_at = begin + 10 * step
                if set_at < last:
                    events.append((set_at, 1, {"kind": "intent", "t": ts(set_at), "session": sid,
                                               "until": ts(set_at + dt.timedelta(hours=3))}))
        else:
            events.append((begin, 1, {"kind": "label", "session": sid, "from": ts(begin),
                                      "to": ts(last), "truth": "must_keep"}))
    t = start
    while t < end:
        events.append((t, 1, {"kind": "pressure", "t": ts(t), "pending_gpus": rng.randrange(0, 4)}))
        t += dt.timedelta(minutes=15)
    events.sort(key=lambda e: (e[0], e[1]))
    if len(events) > lines - 1:  # exactly `lines` lines: keep a prefix, the trace ends there
        events = events[: lines - 1]
        end = events[-1][0] + step
    config = {"kind": "config", "version": 1, "start": ts(start), "end": ts(end),
              "sample_interval_s": interval_s, "gpus_total": 16}
    with open(path, "w") as f:
        f.write(json.dumps(config) + "\n")
        for _, _, obj in events:
            f.write(json.dumps(obj) + "\n")
    return len(events) + 1


class Trace:
    """A small hand-written trace: sessions with a sample every `step` minutes."""

    def __init__(self, hours: float = 6, step: int = 5):
        self.end = at(hours * 60)
        self.step = step
        self.events: list[tuple[dt.datetime, int, dict]] = []

    def session(self, sid, *, start=0, stop=None, gpus=1, sample=None, admin=False, profile="a100", **fields):
        """`sample(minute) -> dict` of sample fields (gpu_util, kernels, hub_last_activity);
        `fields`: more of the session line's (groups, gpu_type)."""
        started = at(start)
        stopped = at(stop) if stop is not None else None
        self.events.append((started, 0, {
            "kind": "session", "id": sid, "user": sid.split("/")[0], "server": sid.split("/")[1],
            "admin": admin, "gpus": gpus, "profile": profile, "started": ts(started),
            "stopped": ts(stopped) if stopped else None, **fields}))
        last = stopped or self.end
        m = start
        while at(m) < last:
            fields = sample(m)
            self.events.append((at(m), 2, {"kind": "sample", "t": ts(at(m)), "session": sid,
                                           "gpu_mem_used_mib": [900] * gpus, "terminals": [], **fields}))
            m += self.step
        return self

    def add(self, minute, obj):
        self.events.append((at(minute), 1, obj))
        return self

    def pressure(self, minute, n):
        return self.add(minute, {"kind": "pressure", "t": ts(at(minute)), "pending_gpus": n})

    def intent(self, minute, sid, until_minute):
        return self.add(minute, {"kind": "intent", "t": ts(at(minute)), "session": sid,
                                 "until": ts(at(until_minute)) if until_minute is not None else None})

    def label(self, sid, frm, to, truth):
        return self.add(frm, {"kind": "label", "session": sid, "from": ts(at(frm)), "to": ts(at(to)),
                              "truth": truth})

    def write(self, path: Path) -> Path:
        self.events.sort(key=lambda e: (e[0], e[1]))
        with open(path, "w") as f:
            f.write(json.dumps({"kind": "config", "version": 1, "start": ts(START), "end": ts(self.end),
                                "sample_interval_s": self.step * 60, "gpus_total": 8}) + "\n")
            for _, _, obj in self.events:
                f.write(json.dumps(obj) + "\n")
        return path


def idle_open_tab(gpus=1, util=0.0):
    """GPU idle, kernel idle since the start, browser tab open (hub activity fresh)."""
    return lambda m: {"gpu_util": [util] * gpus,
                      "kernels": [{"execution_state": "idle", "last_activity": ts(START)}],
                      "hub_last_activity": ts(at(m))}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu_reclaim", "backtest", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
