"""What a session's samples say over time: one pass (`scan`) over them gives the landmarks
the rules of `decider.decide` build their clocks on (the last GPU use, cell, touch, the gaps
in the GPU data), and `retained_samples` the fewest samples that give the same landmarks.
Pure, no I/O.

What counts, and what does not:

* A GPU sample counts as *use* when any GPU is at or above `gpu_idle_threshold` percent.
* On a shared GPU (`Session.gpu_shared`) the device's utilization is everyone's on it: it
  is never read as this session's use or idleness (evidence `shared_gpu_util` only). Its
  kernels decide: a busy kernel, or a kernel's or terminal's `last_activity`, is work;
  the never-used rule does not apply; samples without kernel data are its gaps.
* The hub's `last_activity` alone never keeps a GPU session: an open browser tab moves it.
* Terminal activity does not keep a GPU session either (a terminal can be an idle shell
  left open, and a process running in it that uses the GPU shows up as GPU use). It is
  reported in the evidence only. GPU use and cells (a busy kernel, a kernel's
  `last_activity`: a person running cells is present whatever the GPU does) are work.
* A sample whose GPU data is missing (`gpu_util` null, or one GPU null, or the wrong number
  of GPUs) in the middle of the history is treated as *possible* use for the clocks: the
  idle episode restarts after it (we cannot say the GPU was idle then). It does not turn a
  never-used session into a used one. Unless the gap is *bridged*: no longer than
  `bridge_gaps_up_to`, every GPU idle and no kernel busy in the samples on both sides, and
  no kernel's or terminal's `last_activity` after the sample before the gap, with as many
  kernels after it as before (evidence "bridged_gap").
* `kernels` null in the latest sample means the server did not answer: a reclaim that
  would otherwise happen becomes "hold" ("kernel-data-missing"). Warnings still go out.

Samples the caller must pass (window). Decisions depend on: the latest sample; for each GPU
the latest sample where it was in use; the latest busy-kernel sample and latest cell; the
latest sample that showed the GPU touched; the latest unbridged and the latest bridged gap
in the GPU data with the samples on either side; the samples of the last
`cpu_work_reclaim_after` (the CPU work's run) and (for the evidence) of the last
`idle_reclaim_after`. Passing all samples since the session started is always correct;
`retained_samples()` returns the minimal subset, so a caller that keeps
`retained_samples(kept + new, now=now, config=config)` each cycle gives the same decisions
with O(window) work per decision instead of O(session length).

"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, cast, overload

from .config import PolicyConfig
from .observations import Intent, Sample
from .readings import cell_at, gpu_touched, kernel_busy

# A finished cell sends its last messages as it ends, which moves the kernel's (and through
# jupyterhub-singleuser's activity report, every 300 s, the hub's) last_activity: activity
# this soon after the work ended is the job's own end, not someone there.
JOB_END_SLACK = dt.timedelta(minutes=5)


@overload
def latest_of(first: dt.datetime, /, *times: dt.datetime | None) -> dt.datetime: ...
@overload
def latest_of(*times: dt.datetime | None) -> dt.datetime | None: ...
def latest_of(*times: dt.datetime | None) -> dt.datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def _gpu_util(sample: Sample, gpus: int) -> tuple[float, ...] | str:
    """This sample's utilization, one value per GPU of the session, or why it cannot be judged."""
    util = sample.gpu_util
    if util is None:
        return "no GPU utilization in the sample"
    if None in util:
        return "no data for some GPUs"
    if len(util) != gpus:
        return f"utilization for {len(util)} GPUs, the session holds {gpus}"
    return cast("tuple[float, ...]", tuple(util))  # no None in it


def _last_seen(sample: Sample, *, hub: bool = True) -> dt.datetime | None:
    """The latest sign of a person the sample shows — the hub's last_activity (a browser; with
    `hub`), a kernel's or a terminal's — none later than the sample; None when the server did
    not report its kernels or terminals (nobody can say)."""
    if sample.kernels is None or sample.terminals is None:
        return None
    signs = [k.last_activity for k in sample.kernels] + list(sample.terminals)
    if hub:
        signs.append(sample.hub_last_activity)
    return latest_of(*(min(t, sample.t) for t in signs if t is not None))


def gpu_utils(samples: list[Sample], gpus: int, shared: bool) -> list[_Util]:
    """`_gpu_util` of each sample; on a shared GPU none is this session's own (an empty
    tuple: nothing to count), and a sample without kernel data is the missing data."""
    if shared:
        return [() if s.kernels is not None else "no kernel data in the sample" for s in samples]
    return [_gpu_util(s, gpus) for s in samples]


def seen_before(h: History, latest: Sample, episode_start: dt.datetime,
                 intent: Intent | None) -> tuple[dt.datetime, dt.datetime] | None:
    """For an idle episode that began as work ended (a job in a cell or a terminal, the GPU
    busy; the episode starts at its last busy sample or at its own last messages, up to
    `JOB_END_SLACK` later): when a person was last seen — the signs of a person in the
    work's last sample, an intent set, a terminal active since — and when the job ended: its
    own last kernel or terminal activity (a cell's last messages), when that came after its
    last busy sample. None when the episode began otherwise or nobody can say."""
    ends = [x for x in (h.used_sample, h.busy_sample) if x is not None]
    end = max(ends, key=lambda x: x.t) if ends else None
    if end is None or not end.t <= episode_start <= end.t + JOB_END_SLACK:
        return None
    seen, since = _last_seen(end), _last_seen(latest, hub=False)  # an open tab moves the hub's
    if seen is None or since is None:
        return None
    if since > episode_start + JOB_END_SLACK:
        seen, ended = max(seen, since), episode_start
    else:
        ended = max(episode_start, since)
    return latest_of(seen, intent.set_at if intent else None), ended


def intent_ends_at(intent: Intent, config: PolicyConfig, max_age_at: dt.datetime | None) -> dt.datetime:
    """When the intent stops protecting the session: capped by max_keepalive and max_age."""
    end = min(intent.until, intent.set_at + config.max_keepalive)
    if max_age_at is not None:
        end = min(end, max_age_at)
    return end


@dataclass(frozen=True)
class _Gap:
    """A run of samples without GPU data: indexes of the known samples around it (None at
    either end of the history), of its first and last sample, and whether it is bridged."""

    before: int | None
    first: int
    last: int
    after: int | None
    bridged: bool


_Util = tuple[float, ...] | str  # what _gpu_util says of one sample


def _idle_and_quiet(sample: Sample, util: _Util, threshold: float) -> bool:
    return (not isinstance(util, str) and all(u < threshold for u in util)
            and sample.kernels is not None and not kernel_busy(sample))


def _bridges(before: Sample, after: Sample, utils: tuple[_Util, _Util], config: PolicyConfig) -> bool:
    """Whether the data on both sides of a gap proves the session idle across it: GPUs idle
    and no kernel busy on both sides, no kernel or terminal active since `before`, and the
    same number of kernels (a kernel started or shut down in the gap is someone's action)."""
    if after.t - before.t > config.bridge_gaps_up_to:
        return False
    if not all(_idle_and_quiet(x, u, config.gpu_idle_threshold) for x, u in zip((before, after), utils, strict=True)):
        return False
    assert before.kernels is not None and after.kernels is not None
    if len(after.kernels) != len(before.kernels) or after.terminals is None:
        return False
    activity = [k.last_activity for k in after.kernels] + list(after.terminals)
    return all(t is not None and t <= before.t for t in activity)


def _gaps(samples: list[Sample], utils: list[_Util], config: PolicyConfig) -> list[_Gap]:
    """The gaps in the GPU data, from each sample's `_gpu_util` (`utils`)."""
    gaps: list[_Gap] = []
    before: int | None = None
    first: int | None = None
    for k, util in enumerate(utils):
        if isinstance(util, str):
            if first is None:
                first = k
            continue
        if first is not None:
            bridged = before is not None and _bridges(
                samples[before], samples[k], (utils[before], util), config)
            gaps.append(_Gap(before, first, k - 1, k, bridged))
            first = None
        before = k
    if first is not None:
        gaps.append(_Gap(before, first, len(samples) - 1, None, False))
    return gaps


def _last_gaps(gaps: list[_Gap]) -> tuple[_Gap | None, _Gap | None]:
    """The latest unbridged and the latest bridged gap."""
    unbridged = [g for g in gaps if not g.bridged]
    bridged = [g for g in gaps if g.bridged]
    return (unbridged[-1] if unbridged else None), (bridged[-1] if bridged else None)


@dataclass
class History:
    """One pass over the samples: the landmarks the rules need."""

    last_used: dt.datetime | None = None  # any GPU >= threshold
    used_sample: Sample | None = None  # the sample of `last_used`
    busy_sample: Sample | None = None  # the latest sample with a busy kernel
    last_used_per_gpu: list[dt.datetime | None] = field(default_factory=list)
    last_touched: dt.datetime | None = None  # the GPU touched (readings.gpu_touched)
    last_busy: dt.datetime | None = None  # the latest cell (readings.cell_at)
    cells: list[dt.datetime] = field(default_factory=list)  # busy samples of the CPU-work window
    last_unknown: dt.datetime | None = None  # the last sample of the latest unbridged gap
    bridged: tuple[dt.datetime, dt.datetime] | None = None  # the latest bridged gap's sides
    window_max: list[float | None] = field(default_factory=list)
    window_samples: int = 0


def cpu_window(config: PolicyConfig) -> dt.timedelta:
    """How far back the wrong-profile rule reads the cells (see `scan`)."""
    return config.cpu_work_reclaim_after


def scan(samples: list[Sample], gpus: int, now: dt.datetime, config: PolicyConfig,
          shared: bool = False) -> History:
    h = History(last_used_per_gpu=[None] * gpus, window_max=[None] * gpus)
    window_start = now - config.idle_reclaim_after
    cpu_start = now - cpu_window(config)
    threshold = config.gpu_idle_threshold
    utils = gpu_utils(samples, gpus, shared)
    # most of a backtest's time: this runs for every kept sample at every decision
    for s, util in zip(samples, utils, strict=True):
        in_window = s.t > window_start
        if in_window:
            h.window_samples += 1
        if kernel_busy(s):
            h.busy_sample = s
            if s.t >= cpu_start:  # work, not a notebook just opened
                h.cells.append(s.t)
        cell = cell_at(s, terminals=shared)
        if cell is not None and (h.last_busy is None or cell > h.last_busy):
            h.last_busy = cell
        if isinstance(util, str):
            continue
        if gpu_touched(s, util, threshold):
            h.last_touched = s.t
        for i, u in enumerate(util):
            if u >= threshold:
                h.last_used, h.used_sample = s.t, s
                h.last_used_per_gpu[i] = s.t
            top = h.window_max[i]
            if in_window and (top is None or u > top):
                h.window_max[i] = float(u)
    unbridged, bridged = _last_gaps(_gaps(samples, utils, config))
    if unbridged is not None:
        h.last_unknown = samples[unbridged.last].t
    if bridged is not None:
        assert bridged.before is not None and bridged.after is not None
        h.bridged = (samples[bridged.before].t, samples[bridged.after].t)
    return h


def retained_samples(
    samples: Iterable[Sample], *, now: dt.datetime, config: PolicyConfig, gpus: int,
    shared: bool = False
) -> tuple[Sample, ...]:
    """The subset of `samples` (oldest first) that `decide` needs at `now` and later.

    Keeps the samples of the last `idle_reclaim_after` or `cpu_work_reclaim_after`, whichever
    is longer, the latest sample, and the landmark samples: per GPU the latest one where it
    was in use, the latest with a busy kernel, the latest cell, the latest touching the GPU, the
    last sample of the latest unbridged gap in the GPU data and the first of the latest
    bridged one, with the known samples on either side of every gap a kept sample belongs
    to (bridging is judged on them). Deciding on the result gives the same decision as
    deciding on all samples (evidence included), at this `now` and at any later one once
    newer samples are appended. Samples after `now` are kept as they are."""
    samples = list(samples)
    if gpus <= 0:
        return tuple(samples[-1:])
    window_start = now - max(config.idle_reclaim_after, cpu_window(config))
    keep: set[int] = set()
    last_used: list[int | None] = [None] * gpus
    last_busy = last_touched = busy_sample = None
    busy_at: dt.datetime | None = None
    utils = gpu_utils(samples, gpus, shared)
    for k, (s, util) in enumerate(zip(samples, utils, strict=True)):
        if s.t >= window_start:
            keep.add(k)
            continue
        worked = cell_at(s, terminals=shared)
        if worked is not None and (busy_at is None or worked >= busy_at):
            last_busy, busy_at = k, worked
        if kernel_busy(s):
            busy_sample = k
        if isinstance(util, str):
            continue
        if gpu_touched(s, util, config.gpu_idle_threshold):
            last_touched = k
        for i, u in enumerate(util):
            if u >= config.gpu_idle_threshold:
                last_used[i] = k
    gaps = _gaps(samples, utils, config)
    unbridged, bridged = _last_gaps(gaps)
    keep.update(k for k in (*last_used, last_busy, busy_sample, last_touched, unbridged.last if unbridged else None,
                            bridged.first if bridged else None) if k is not None)
    if samples:
        keep.add(len(samples) - 1)
    for g in gaps:  # the sides of every gap still seen, so it is judged as before
        if any(g.first <= k <= g.last for k in keep):
            keep.update(k for k in (g.before, g.after) if k is not None)
    return tuple(samples[k] for k in sorted(keep))
