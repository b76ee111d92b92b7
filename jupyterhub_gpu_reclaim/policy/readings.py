"""What one sample says about a person and about the GPU, beyond the utilization threshold
(docs/policy.md, "What the policy reads"): the readings `policy.decide` builds its clocks on.
Pure, no I/O.

- **A person running cells is present** (`cell_at`): a busy kernel, or a kernel's
  `last_activity` (a cell started or ended between two samples), whatever the GPU does.
- **Low utilization is use** (`gpu_touched`): a GPU was used since the server started when
  it read `TOUCHED` or more, when its memory is held (`MEMORY_HELD_MIB`, a CUDA context: the
  server's process opened the GPU), or when it read above zero while a kernel was busy (a
  real cell at 0.1-0.9 %).
- **CPU work going on** (`cpu_work_since`): cells with no pause of `pause` or more between
  them, up to now; the policy's wrong-profile rule reads how long it has gone on.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable

from .observations import Sample

# Percent at which a GPU counts as touched whatever `gpu_idle_threshold` says: DCGM's
# utilization is a whole percent per reading, so a sample average below 1 with no kernel busy
# is the noise of an idle engine (GR_ENGINE_ACTIVE on MIG has one).
TOUCHED = 1.0
# Framebuffer memory (DCGM_FI_DEV_FB_USED) that means the server's process ran on the GPU:
# above what an idle GPU can read (0 to a few MiB; around 0.5 GiB where the exporter counts
# the driver's reserved memory as used, as DCGM did before its FB_RESERVED field), below what
# a framework holds once it ran there (a context and its math libraries' workspaces).
MEMORY_HELD_MIB = 1024.0


# The readings below run for every sample the policy scans, at every decision (the backtest's
# cost): plain loops, not generators, which cost several times as much per sample.


def kernel_busy(sample: Sample) -> bool:
    for k in sample.kernels or ():
        if k.execution_state == "busy":
            return True
    return False


def _latest(times: Iterable[dt.datetime | None], before: dt.datetime) -> dt.datetime | None:
    present = [t for t in times if t is not None and t <= before]
    return max(present) if present else None


def cell_at(sample: Sample, *, terminals: bool = False) -> dt.datetime | None:
    """The latest sign of someone running cells the sample shows: its time when a kernel is
    busy, else the latest kernel `last_activity` (a cell run between samples), none later
    than the sample; with `terminals`, a terminal's too (a shared GPU, where no utilization
    of the server's own shows a job started from a terminal)."""
    if kernel_busy(sample):
        return sample.t
    times = [k.last_activity for k in sample.kernels or ()]
    if terminals:
        times += list(sample.terminals or ())
    return _latest(times, sample.t)


def gpu_touched(sample: Sample, util: tuple[float, ...], threshold: float) -> bool:
    """Whether the sample shows the server's process on its GPU: a reading of
    min(threshold, TOUCHED) or more, GPU memory held, or a reading above zero while a kernel
    is busy (real training cells report 0.1-0.9 %)."""
    touched = min(threshold, TOUCHED)
    for u in util:
        if u >= touched:
            return True
    for m in sample.gpu_mem_used_mib or ():
        if m is not None and m >= MEMORY_HELD_MIB:
            return True
    return kernel_busy(sample) and any(u > 0 for u in util)


def cpu_work_since(cells: Iterable[dt.datetime], *, now: dt.datetime, pause: dt.timedelta,
                   since: dt.datetime) -> dt.datetime | None:
    """When the cells going on at `now` began: the earliest of `cells` reached from the
    latest one with no pause of `pause` or more, at `since` at the earliest (what the
    samples before cannot tell); None when no cell ran within `pause` of `now`."""
    times = sorted(set(cells))
    if not times or now - times[-1] >= pause:
        return None
    start = times[-1]
    for earlier in reversed(times[:-1]):
        if start - earlier >= pause:
            break
        start = earlier
    return max(start, since)
