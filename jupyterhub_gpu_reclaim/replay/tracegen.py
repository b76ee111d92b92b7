"""Labelled session traces made from a seed: the kinds of sessions a course or lab hub has,
each labelled by the trace format's rules (docs/trace-format.md, "Generated traces").

`generate(seed=1, hours=48, sessions=80)` returns the records of a trace (config first,
then sorted by time), `write_trace` writes them; `jupyterhub-gpu-reclaim generate-trace`
does both. The same arguments give the same file, byte for byte: every random choice is
drawn from random generators seeded from the seed alone, in a fixed order.

Each kind of session is one function in `SCENARIOS`, which plays one session as a
`_Script`: a run of phases (interactive work, absence, a silent training cell, CPU
cells, ...) with their lengths drawn within realistic ranges, the intents the user sets,
and the labels, placed where the phases change. The kind is written on the session line
(``"scenario": "lunch-break"``) so that the backtest can score each kind apart; the policy
never sees it. Pressure bursts (``pressure`` lines) are drawn for the whole trace.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ..policy.observations import IntentChange, Kernel, Pressure, Sample, Session, SessionSample
from .trace import Label, Record, TraceConfig, TraceSession, Truth

__all__ = ["SCENARIOS", "DEFAULT_START", "generate"]

MINUTE = dt.timedelta(minutes=1)
DEFAULT_START = dt.datetime(2026, 11, 2, 8, 0, tzinfo=dt.timezone.utc)  # a Monday morning
# Yale's rule for jobs that never used their GPU: until then nobody can say it will not be
# used. A fact about users, for the labels: not the policy's setting, which is being judged.
NEVER_USED_CLEAR = 60 * MINUTE
# The hour after a run ends with nobody there belongs to whoever checks on its results, as
# the trace format's sample trace labels a finished silent training. Also for the labels.
RESULTS_HOUR = 60 * MINUTE
_FOREVER = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


Mode = Literal["work", "away", "train", "cpu", "loader", "outage"]


@dataclass
class _Phase:
    """What the session does until `end`. Modes: "work" (interactive GPU cells),
    "away" (nothing runs), "train" (one silent cell, GPUs busy), "cpu" (CPU cells every few
    minutes, GPU untouched), "loader" (a slow data loader, GPU 3-8 %, in a cell or a
    terminal), "outage" (the exporter is down: no GPU data)."""

    end: dt.datetime
    mode: Mode
    tab: bool = True  # a browser tab open: the hub's last_activity stays fresh
    busy_gpus: tuple[int, ...] | None = None  # "train": the GPUs it uses (None: all)
    terminal: bool = False  # "loader": a script in a terminal, the kernel idle


@dataclass
class _Script:
    """One session being played: its phases from `started`, labels, intents and stop."""

    rng: random.Random
    gpus: int
    started: dt.datetime
    t: dt.datetime = field(init=False)
    phases: list[_Phase] = field(default_factory=list)
    labels: list[tuple[Truth, dt.datetime, dt.datetime]] = field(default_factory=list)
    intents: list[tuple[dt.datetime, dt.datetime]] = field(default_factory=list)
    stopped: dt.datetime | None = None

    def __post_init__(self) -> None:
        self.t = self.started

    def minutes(self, lo: float, hi: float) -> dt.timedelta:
        return dt.timedelta(minutes=self.rng.randint(int(lo), int(hi)))

    def phase(self, mode: Mode, length: dt.timedelta, **kw: Any) -> tuple[dt.datetime, dt.datetime]:
        """Do `mode` for `length` from now; returns (start, end)."""
        start, self.t = self.t, self.t + length
        self.phases.append(_Phase(self.t, mode, **kw))
        return start, self.t

    def label(self, truth: Truth, start: dt.datetime, end: dt.datetime = _FOREVER) -> None:
        """`truth` from `start` to `end` (default: to the session's end)."""
        self.labels.append((truth, start, end))

    def leave(self, intent_end: dt.datetime | None = None) -> None:
        """The last work ended now, with the user there. 30 % stop the server within an
        hour (must keep up to the stop: back within 2 h); the others go (`gone`), and the
        server is reclaimable from now, or from the end of an intent still running."""
        if self.rng.random() < 0.3:
            start, self.stopped = self.phase("away", self.minutes(2, 60))
            self.label("must_keep", start, self.stopped)
            return
        if intent_end is not None and intent_end > self.t:
            self.label("must_keep", self.t, intent_end)
        self.label("reclaimable", max(self.t, intent_end or self.t))
        self.gone(tab=self.rng.random() < 0.5)

    def job_ended(self) -> None:
        """Work that ran with nobody there ended now: must keep for `RESULTS_HOUR` (someone
        may check on its results), reclaimable after; nobody comes back (`gone`)."""
        self.label("must_keep", self.t, self.t + RESULTS_HOUR)
        self.label("reclaimable", self.t + RESULTS_HOUR)
        self.gone(tab=False)

    def gone(self, *, tab: bool) -> None:
        """Nobody comes back: the server idles until the user stops it from elsewhere,
        1-6 h later (20 %: that evening) or 6-14 h later (80 %: the next morning). Most
        stay the night: the problem this project exists for (docs/policy.md, "Tuning
        traces")."""
        _, self.stopped = self.phase(
            "away", self.minutes(60, 360) if self.rng.random() < 0.2 else self.minutes(360, 840), tab=tab)


# --------------------------------------------------------------------------- the kinds
# Each plays one session and labels it; the rule is in its docstring (and in the docs).


def interactive(s: _Script) -> None:
    """Bursts of GPU cells (10-45 min) with idle gaps (5-50 min) between, then the user
    leaves. Must keep up to the last burst's end (every gap is under 2 h); then `leave`."""
    for _ in range(s.rng.randint(1, 4)):
        s.phase("work", s.minutes(10, 45))
        s.phase("away", s.minutes(5, 50), tab=s.rng.random() < 0.7)
    s.phase("work", s.minutes(10, 45))
    s.label("must_keep", s.started, s.t)
    s.leave()


def lunch_break(s: _Script) -> None:
    """Work, step away 60-115 min (lunch, a lecture), come back to the kernel and work
    again. Must keep from the start to the end of the second stretch of work: the user is
    back within 2 h of their last use. Then `leave`."""
    s.phase("work", s.minutes(30, 120))
    s.phase("away", s.minutes(60, 115), tab=s.rng.random() < 0.5)
    s.phase("work", s.minutes(20, 90))
    s.label("must_keep", s.started, s.t)
    s.leave()


def silent_training(s: _Script) -> None:
    """A few minutes of work start one long cell that trains silently for 2-10 h (GPU busy,
    kernel busy, no output, no browser); it ends with nobody there. Must keep until it
    ends and an hour more (`job_ended`), reclaimable after."""
    s.phase("work", s.minutes(5, 20))
    s.phase("train", s.minutes(120, 600), tab=False)
    s.label("must_keep", s.started, s.t)
    s.job_ended()


def training_return(s: _Script) -> None:
    """Training for 1-4 h, then the user comes back 2.5-8 h after it ended, to the same
    kernel (its state: the trained model). Must keep while training; gray while away (a
    reclaim loses the kernel state someone returns to; reasonable policies differ); must
    keep from the return to the end of that work; then `leave`."""
    s.phase("work", s.minutes(5, 20))
    s.phase("train", s.minutes(60, 240), tab=False)
    s.label("must_keep", s.started, s.t)
    away, back = s.phase("away", s.minutes(150, 480), tab=s.rng.random() < 0.5)
    s.label("gray", away, back)
    s.phase("work", s.minutes(20, 90))
    s.label("must_keep", back, s.t)
    s.leave()


def cpu_only(s: _Script) -> None:
    """CPU work on a GPU server for 2-8 h: a CPU cell of 1-3 min every 3-10 min, the GPU
    never touched (0 %, no memory). Must keep for the first hour (Yale's window for jobs
    that never used their GPU: before it nobody can say the GPU will not be used), then
    reclaimable to the end, work or not: the GPU was held with nothing using it."""
    s.phase("cpu", s.minutes(120, 480))
    clear = s.started + NEVER_USED_CLEAR
    s.label("must_keep", s.started, clear)
    s.label("reclaimable", clear)
    if s.rng.random() < 0.4:
        _, s.stopped = s.phase("away", s.minutes(2, 60))
    else:
        s.gone(tab=s.rng.random() < 0.5)


def cpu_between_gpu(s: _Script) -> None:
    """A GPU phase, 1-3 h of CPU cells (the GPU idle, its memory still held: the model is
    loaded), a second GPU phase. Must keep up to the end of the second GPU phase (work in
    progress throughout); then `leave`."""
    s.phase("work", s.minutes(20, 90))
    s.phase("cpu", s.minutes(60, 180))
    s.phase("work", s.minutes(20, 90))
    s.label("must_keep", s.started, s.t)
    s.leave()


def intent_back(s: _Script) -> None:
    """Work, then "keep alive until" 2-6 h ahead, away, back before the intent ends, work
    again. Must keep to the end of the second work or of the intent, whichever is later (a
    declared intent, and work); then `leave`."""
    s.phase("work", s.minutes(20, 90))
    hold = s.minutes(120, 360)
    s.intents.append((s.t, s.t + hold))
    s.phase("away", s.minutes(60, hold.total_seconds() / 60 - 5), tab=s.rng.random() < 0.5)
    s.phase("work", s.minutes(20, 90))
    s.label("must_keep", s.started, s.t)
    s.leave(intent_end=s.intents[0][1])


def intent_expired(s: _Script) -> None:
    """Work, then "keep alive until" 2-6 h ahead, and the user never comes back. Must keep
    until the intent's end (declared), reclaimable after."""
    s.phase("work", s.minutes(20, 90))
    tab = s.rng.random() < 0.5
    left, until = s.phase("away", s.minutes(120, 360), tab=tab)
    s.intents.append((left, until))
    s.label("must_keep", s.started, until)
    s.label("reclaimable", until)
    s.gone(tab=tab)


def metrics_outage(s: _Script) -> None:
    """Work, the user goes home, and 20-90 min later the GPU metrics stop for 30-120 min
    (gpu_util null) while the GPU and the kernel stay idle. Must keep while working;
    reclaimable while idle; must keep during the outage (the data needed to judge was
    missing); reclaimable from the data's return."""
    s.phase("work", s.minutes(30, 120))
    s.label("must_keep", s.started, s.t)
    tab = s.rng.random() < 0.5
    left, down = s.phase("away", s.minutes(20, 90), tab=tab)
    s.label("reclaimable", left, down)
    down, up = s.phase("outage", s.minutes(30, 120), tab=tab)
    s.label("must_keep", down, up)
    s.label("reclaimable", up)
    s.gone(tab=tab)


def slow_loader(s: _Script) -> None:
    """A job fed by a slow data loader, GPU at 3-8 % for 2-8 h, in a cell or in a terminal
    (the kernel idle then), no browser. Must keep while it runs and an hour more
    (`job_ended`), reclaimable after."""
    s.phase("work", s.minutes(5, 20))
    s.phase("loader", s.minutes(120, 480), tab=False, terminal=s.rng.random() < 0.4)
    s.label("must_keep", s.started, s.t)
    s.job_ended()


def multi_gpu_partial(s: _Script) -> None:
    """A 2-4 GPU server training on only some of its GPUs (the others at 0 %) for 3-10 h,
    in a silent cell. Must keep while it trains and an hour more (`job_ended`), reclaimable
    after."""
    s.phase("work", s.minutes(10, 30))
    busy = tuple(range(s.rng.randint(1, s.gpus - 1)))
    s.phase("train", s.minutes(180, 600), tab=False, busy_gpus=busy)
    s.label("must_keep", s.started, s.t)
    s.job_ended()


def cpu_first(s: _Script) -> None:
    """Data preparation first: CPU cells for 10-150 min (the GPU untouched), then GPU work
    (as all 5 real sessions whose first hour ran only CPU cells went on to their GPU). Must
    keep throughout (a person running cells); then `leave`."""
    s.phase("cpu", s.minutes(10, 150))
    s.phase("work", s.minutes(20, 120))
    s.label("must_keep", s.started, s.t)
    s.leave()


def late_start(s: _Script) -> None:
    """Nothing runs after the start for 60-115 min (30 %) or 2.5-8 h (70 %), then work (real
    sessions: 6 of 51 ran a first cell 60-120 min after the start, 17 after 2 h or more).
    Must keep to the first cell when it comes within 2 h of the start, else for the first
    hour, gray from then to the first cell; must keep through the work; then `leave`."""
    late = s.rng.random() < 0.7
    start, first = s.phase("away", s.minutes(150, 480) if late else s.minutes(60, 115), tab=s.rng.random() < 0.5)
    if late:
        s.label("must_keep", start, start + NEVER_USED_CLEAR)
        s.label("gray", start + NEVER_USED_CLEAR, first)
    s.phase("work", s.minutes(20, 120))
    s.label("must_keep", start if not late else first, s.t)
    s.leave()


def long_job_return(s: _Script) -> None:
    """A long job (6-24 h, silent, no browser), and its owner back 125-160 min after it ended
    (real users came back 139 and 149 min after day-long jobs), to work on its results. Must
    keep while it runs and 2 h after it, gray from then to the return (a pause of 2 h or more,
    as the real sessions are labelled); must keep through the work; then `leave`."""
    s.phase("work", s.minutes(5, 20))
    s.phase("train", s.minutes(360, 1440), tab=False)
    ended = s.t - MINUTE  # its last busy minute, as the real sessions count a cell's end
    s.label("must_keep", s.started, ended + 2 * RESULTS_HOUR)
    _, back = s.phase("away", s.minutes(125, 160), tab=False)
    s.label("gray", ended + 2 * RESULTS_HOUR, back)
    s.phase("work", s.minutes(20, 90))
    s.label("must_keep", back, s.t)
    s.leave()


# kind → (play, weight in the mix, GPUs: None for 1 or sometimes 2)
SCENARIOS: dict[str, tuple[Callable[[_Script], None], int, tuple[int, int] | None]] = {
    "interactive": (interactive, 3, None),
    "lunch-break": (lunch_break, 2, None),
    "silent-training": (silent_training, 1, None),
    "training-return": (training_return, 1, None),
    "cpu-only": (cpu_only, 1, None),
    "cpu-between-gpu": (cpu_between_gpu, 1, None),
    "intent-back": (intent_back, 1, None),
    "intent-expired": (intent_expired, 1, None),
    "metrics-outage": (metrics_outage, 1, None),
    "slow-loader": (slow_loader, 1, None),
    "multi-gpu-partial": (multi_gpu_partial, 1, (2, 4)),
    "cpu-first": (cpu_first, 1, None),
    "late-start": (late_start, 2, None),
    "long-job-return": (long_job_return, 1, None),
}


# --------------------------------------------------------------------------- samples


def _samples(s: _Script, sid: str, end: dt.datetime, step: dt.timedelta) -> list[SessionSample]:
    """The session's samples from `started` to `end`, every `step`, phase by phase."""
    rng = s.rng
    gpus = s.gpus
    mem = [float(rng.choice((1800, 4200, 9600, 15000, 22000, 38000)))] * gpus
    used = [False] * gpus  # a GPU once used keeps its memory (the kernel holds the model)
    kernel_last = hub = s.started
    terminal_last: dt.datetime | None = None
    cell_end = next_cell = s.started
    level = _cell_util(rng)
    out: list[SessionSample] = []
    phases = iter(s.phases)
    phase = next(phases)
    t = s.started
    while t < end:
        while phase.end <= t:
            phase, previous = next(phases), phase
            if phase.mode in ("train", "loader") and previous.mode != phase.mode:
                # the cell (or the terminal's script) started now; a silent one sends nothing more
                if phase.terminal:
                    terminal_last = t
                else:
                    kernel_last = t
        util: list[float | None] | None = [0.0] * gpus
        state = "idle"
        if phase.mode in ("work", "cpu"):
            # a cell of 1-5 min (GPU) or 1-3 min (CPU) every 2-10 min; the last sample of a
            # work phase is always in a cell (the labels' "last use")
            if t >= next_cell:
                level = _cell_util(rng)
                cell_end = t + MINUTE * rng.randint(1, 5 if phase.mode == "work" else 3)
                next_cell = t + MINUTE * rng.randint(2 if phase.mode == "work" else 3, 10)
            last_of_phase = t + step >= phase.end
            if t < cell_end or (phase.mode == "work" and last_of_phase):
                state, kernel_last = "busy", t
                if phase.mode == "work":
                    util = [round(min(100.0, level * rng.uniform(0.9, 1.1)), 2) for _ in range(gpus)]
            hub = t
        elif phase.mode == "train":
            busy = phase.busy_gpus if phase.busy_gpus is not None else range(gpus)
            util = [round(rng.uniform(70, 99), 1) if i in busy else 0.0 for i in range(gpus)]
            state = "busy"
        elif phase.mode == "loader":
            util = [round(rng.uniform(3, 8), 1) for _ in range(gpus)]
            state = "idle" if phase.terminal else "busy"
        elif phase.mode == "outage":
            util = None
        if phase.tab:
            hub = t
        if util is not None:
            used = [u or (x is not None and x > 0) for u, x in zip(used, util, strict=True)]
        out.append(SessionSample(session=sid, sample=Sample(
            t=t,
            gpu_util=tuple(util) if util is not None else None,
            gpu_mem_used_mib=None if util is None else tuple(m if u else 0.0 for m, u in zip(mem, used, strict=True)),
            kernels=(Kernel(execution_state=state, last_activity=kernel_last),),
            terminals=(terminal_last,) if terminal_last is not None else (),
            hub_last_activity=hub,
        )))
        t += step
    return out


def _cell_util(rng: random.Random) -> float:
    """The DCGM utilization one interactive cell reaches, as real notebook cells do (median
    8.5 %, a tenth below 3.4 %, 4 % below 1 %; docs/policy.md, "Tuning traces")."""
    r = rng.random()
    if r < 0.04:
        return rng.uniform(0.1, 0.95)
    if r < 0.10:
        return rng.uniform(1.0, 3.4)
    if r < 0.80:
        return rng.uniform(3.4, 13.0)
    return rng.uniform(13.0, 95.0)


# --------------------------------------------------------------------------- the trace


def _pressure(rng: random.Random, start: dt.datetime, end: dt.datetime) -> list[Pressure]:
    """Bursts of 15-90 min with 1-6 GPUs requested by pending pods (a new value every 5
    min), 2-8 h apart; none requested in between."""
    out = [Pressure(start, 0)]
    t = start
    while True:
        t += dt.timedelta(minutes=rng.randint(120, 480))
        stop = t + dt.timedelta(minutes=5 * rng.randint(3, 18))
        if t >= end:
            return out
        pending = rng.randint(1, 4)
        while t < min(stop, end):
            out.append(Pressure(t, pending))
            pending = max(1, min(6, pending + rng.randint(-1, 1)))
            t += 5 * MINUTE
        if t < end:
            out.append(Pressure(t, 0))


def _start_time(rng: random.Random, start: dt.datetime, hours: float, step: dt.timedelta) -> dt.datetime:
    """A start on the sample grid, mostly in the day (07:00-20:00 UTC), 1 h before the end at the latest."""
    span = max(hours - 1, hours / 2)
    for _ in range(20):
        t = start + dt.timedelta(hours=rng.uniform(0, span))
        if 7 <= t.hour < 20 or rng.random() < 0.2:
            break
    return start + step * int((t - start) / step)


def generate(*, seed: int = 1, hours: float = 48, sessions: int = 80,
             start: dt.datetime = DEFAULT_START, interval_s: int = 60) -> list[Record]:
    """A labelled trace of `sessions` sessions over `hours`, sampled every `interval_s`:
    the config record, then every record sorted by time (labels after their session)."""
    if hours <= 0 or sessions < 1 or interval_s <= 0:
        raise ValueError("hours, sessions and interval_s must be positive")
    rng = random.Random(seed)
    end = start + dt.timedelta(hours=hours)
    step = dt.timedelta(seconds=interval_s)
    pool = [name for name, (_, weight, _) in SCENARIOS.items() for _ in range(weight)]
    rng.shuffle(pool)
    events: list[tuple[dt.datetime, int, int, Record]] = []
    held: list[tuple[dt.datetime, int]] = []  # (time, +/- GPUs): the GPUs the trace needs
    for i in range(sessions):
        kind = pool[i % len(pool)]
        play, _, gpu_range = SCENARIOS[kind]
        srng = random.Random(f"{seed}/{i}")  # its own stream: more sessions leave these as they were
        gpus = srng.randint(*gpu_range) if gpu_range else (2 if srng.random() < 0.15 else 1)
        user = f"u{i + 1:03d}"
        server = "gpu" if srng.random() < 0.2 else ""
        sid = f"{user}/{server}"
        script = _Script(srng, gpus, _start_time(rng, start, hours, step))
        play(script)
        if script.stopped is not None and script.stopped >= end:
            script.stopped = None
        natural_end = script.stopped or end
        session = Session(id=sid, user=user, server=server, gpus=gpus, started=script.started,
                          profile="a100" if gpus == 1 else f"a100-x{gpus}")
        events.append((script.started, 0, i, TraceSession(session, script.stopped, scenario=kind)))
        for truth, frm, to in script.labels:
            frm, to = max(frm, script.started), min(to, natural_end)
            if frm < to:
                events.append((script.started, 1, i, Label(sid, frm, to, truth)))
        for t, until in script.intents:
            if t < natural_end:
                events.append((t, 2, i, IntentChange(t, sid, until)))
        events.extend((r.t, 3, i, r) for r in _samples(script, sid, natural_end, step))
        held += [(script.started, gpus), (natural_end, -gpus)]
    events.extend((p.t, 2, -1, p) for p in _pressure(rng, start, end))
    events.sort(key=lambda e: e[:3])
    peak = now = 0
    for _, delta in sorted(held):
        now += delta
        peak = max(peak, now)
    config = TraceConfig(start=start, end=end, sample_interval_s=interval_s, gpus_total=peak)
    return [config, *(e[3] for e in events)]
