"""The reclaim policy: a pure, deterministic function of what is known about a session.

`decide(view, now=..., pending_gpus=..., config=...)` returns one `Decision`
(keep / warn / reclaim / hold) with the rule that fired, a sentence a user can read, the
idle episode's start and the warnings it cleared, and what was measured and the rule's
clock, typed (policy/evidence.py; `Decision.shown()` is their display). It does no I/O and never reads the clock: the live service and
`backtest` call the same code with their own `now`.

Precedence (first match wins):

1. **Servers without GPUs** (`gpus == 0`) follow jupyterhub-idle-culler 2.0 exactly
   (rules "idle-culler-timeout", "idle-culler-max-age"; see `culler`). No
   warnings, no exemptions: idle-culler has neither, and one service replaces it.
2. **Exempt** user, group or profile: keep ("exempt").
3. **Missing or stale GPU data**: hold ("gpu-data-missing"); never warn, never reclaim
   (Princeton's Job Defense Shield never cancels on missing data).
   A **shared GPU** (`gpu_shared`, time-sliced) has no utilization of its own: the
   kernels are its data, and missing kernel data holds ("kernel-data-missing").
4. **A busy kernel** in the latest sample: keep ("kernel-busy"). Work in progress. Not
   while CPU work goes on with the GPU never used (`readings`): its own clock.
5. **max_age** (optional hard lifetime of GPU sessions): warn `warning_lead` before
   `started + max_age`, reclaim at it ("max-age"). It also caps intents.
6. **Intent** ("keep alive until T", T capped at `set_at + max_keepalive` and at the
   max-age deadline): keep ("intent") while T > now. It does not restart the idle clock
   (only setting it does): when the rule below would have warned before T, the warning
   comes `warning_lead` before T and the reclaim `intent_grace` after it ("intent-ended").
7. **Idleness**: "gpu-never-used" (never-used timings from the start; the idle timings
   from a cell) or "gpu-idle" (Princeton/Yale: warn 60 min, reclaim 120 min), measured from
   the start of the idle episode (see below); on a shared GPU "shared-gpu-idle-kernels",
   with the idle timings. "cpu-work-on-gpu" (the wrong profile): the GPU never used and
   cells with no pause of `idle_warn_after`, for `cpu_work_warn_after` (warn) and
   `cpu_work_reclaim_after` (reclaim) from the first of them.
   "job-ended-unattended" (one warning shared with "gpu-idle"): an episode that began as
   GPU work ended, when the last sign of a person in the work's last sample (the hub's,
   a kernel's or a terminal's `last_activity`, or the intent's setting) came
   `idle_reclaim_after` or more before it and no kernel or terminal moved since beyond
   `JOB_END_SLACK`: warn `unattended_warn_after`, reclaim `unattended_reclaim_after`
   after the work ended (its last busy sample, or the job's own last kernel or terminal
   activity within `JOB_END_SLACK` of it).
   A warning always comes first; the reclaim happens no earlier than `warning_lead` after
   it and no earlier than the `reclaim_at` the warning announced.

Idle episodes and warnings. The episode of a session starts at the latest of: the session
start, the last GPU-use sample, the last cell, the last sample of an unbridged gap in the
GPU data, and the moment the intent was set. "cpu-work-on-gpu" warnings are the CPU
work's: cleared when the GPU is used or the work pauses (a new run starts). Warnings in
`view.warnings` of the idle rules sent at or before the episode start belong to a finished
episode: they are ignored and the decision's `cleared` lists them (`policy.step` drops them
from the session's warnings); its `idle_since` is the episode's start. "max-age"
warnings are never cleared (the lifetime does not restart). "warn" is emitted only when no
warning of the same rule exists in the current episode; a warned session waiting for its
reclaim time gets "keep" with the rule of the episode and its `deadline` (`warned_at`,
`due`).

What the samples say (what counts as use, gaps, the samples a caller must keep) is `scan`'s.

Samples, warnings and intents dated after `now` are ignored (not yet observed).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from .config import PolicyConfig
from .culler import decide_user, decide_without_gpu
from .culler import minutes as _minutes
from .evidence import Deadline, Exempt, Measured
from .observations import Decision, SessionView
from .readings import TOUCHED, cpu_work_since, kernel_busy
from .scan import cpu_window, gpu_utils, intent_ends_at, latest_of, scan, seen_before

__all__ = ["IDLE_RULES", "TOUCHED", "decide", "decide_user"]

# Rules whose warnings belong to an idle episode (cleared by activity or an intent).
IDLE_RULES = frozenset({"gpu-never-used", "gpu-idle", "intent-ended",
                        "shared-gpu-idle-kernels", "job-ended-unattended"})
# The wrong-profile rule's clock is the CPU work's, which cells do not restart: its warning
# is cleared when the GPU is used, when the work pauses, or by a new run of work.
CPU_WORK = "cpu-work-on-gpu"
# rules that share one warning: the same clock under another name
_FAMILY = {"job-ended-unattended": "gpu-idle"}

def decide(
    view: SessionView, *, now: dt.datetime, pending_gpus: int, config: PolicyConfig
) -> Decision:
    """Decide what to do with one session at `now`. Pure: same inputs, same decision."""
    session = view.session
    samples = [s for s in view.samples if s.t <= now]
    if session.gpus <= 0:
        return decide_without_gpu(view, samples, now=now, config=config)

    episode: dict[str, Any] = {}  # the episode's start and the warnings cleared, once known

    def decision(_action, _rule, _reason, _reclaim_at=None, **facts) -> Decision:
        return Decision(session.id, _action, _rule, _reason, _reclaim_at, **facts, **episode)

    # 2. exemptions
    if session.user in config.exempt_users:
        return decision("keep", "exempt", f"user {session.user} is exempt", exempt=Exempt("user"))
    groups = sorted(session.groups & config.exempt_groups)
    if groups:
        return decision("keep", "exempt", f"group {groups[0]} is exempt",
                        exempt=Exempt("group", tuple(groups)))
    if session.profile and session.profile in config.exempt_profiles:
        return decision("keep", "exempt", f"profile {session.profile} is exempt",
                        exempt=Exempt("profile"))

    # 3. missing or stale GPU data (on a shared GPU: kernel data)
    shared = session.gpu_shared
    latest = samples[-1] if samples else None
    if latest is None:
        util: tuple[float, ...] | str = "no GPU samples"
    elif now - latest.t > config.stale_after:
        util = f"the latest GPU sample is {_minutes(now - latest.t)} old"
    else:
        util = gpu_utils([latest], session.gpus, shared)[0]
    if isinstance(util, str) and shared:
        return decision("hold", "kernel-data-missing",
                        f"kernel data missing ({util}); the GPU is shared, so only the kernels "
                        "tell whether this server works",
                        measured=Measured(latest_sample=latest.t if latest else None, problem=util, gpu_shared=True))
    if isinstance(util, str):
        return decision("hold", "gpu-data-missing",
                        f"GPU data missing ({util}); never reclaimed on missing data",
                        measured=Measured(latest_sample=latest.t if latest else None, problem=util))
    assert latest is not None

    h = scan(samples, session.gpus, now, config, shared)
    max_age_at = session.started + config.max_age if config.max_age else None
    intent = view.intent if view.intent is not None and view.intent.set_at <= now else None
    intent_end = intent_ends_at(intent, config, max_age_at) if intent else None

    never_used = h.last_touched is None and not shared
    # a person running cells is present whatever the GPU does: the idle clock runs from their
    # last cell; CPU cells going on with the GPU untouched have a clock of their own
    episode_start = latest_of(session.started, h.last_used, h.last_busy,
                            h.last_unknown, intent.set_at if intent else None)
    cpu_since = None
    if never_used and not config.cpu_work_keeps_unused_gpu:
        cpu_since = cpu_work_since(h.cells, now=now, pause=config.idle_warn_after,
                                   since=latest_of(session.started, now - cpu_window(config),
                                                 intent.set_at if intent else None))
    warnings = [w for w in view.warnings if w.t <= now]
    cleared = [w for w in warnings if (w.rule in IDLE_RULES and w.t <= episode_start) or (
        w.rule == CPU_WORK and (cpu_since is None or w.t < cpu_since))]
    current = [w for w in warnings if w not in cleared]
    episode.update(idle_since=episode_start, cleared=tuple(cleared))

    idle_gpus = [
        i for i, t in enumerate(h.last_used_per_gpu)
        if latest_of(session.started, t) <= now - config.idle_reclaim_after
    ]
    bridged = h.bridged if h.bridged is not None and h.bridged[0] >= episode_start else None
    measured = Measured(
        gpus=session.gpus, latest_sample=latest.t, samples_considered=h.window_samples,
        window=config.idle_reclaim_after, window_max_util=tuple(h.window_max),
        latest_util=tuple(float(u) for u in util), never_used=never_used, last_used=h.last_used,
        last_busy_kernel=h.last_busy, last_gpu_data_missing=h.last_unknown, cpu_work_since=cpu_since,
        hub_last_activity=latest.hub_last_activity,
        terminal_last_activity=latest_of(*(latest.terminals or ())),
        # reported, never counted: the device's use is not this server's alone
        gpu_shared=shared, shared_gpu_util=tuple(latest.gpu_util or ()) if shared else None,
        bridged_gap=bridged,
        intent_until=intent.until if intent else None, intent_end=intent_end,
        intent_capped=intent_end != intent.until if intent else None)

    # 4. a busy kernel is work in progress (CPU work on an untouched GPU has its own clock)
    if kernel_busy(latest) and cpu_since is None:
        return decision("keep", "kernel-busy", "a kernel is busy: work in progress", measured=measured)

    def timed(rule: str, warn_at: dt.datetime, reclaim_at: dt.datetime, what: str) -> Decision | None:
        """Warn / wait / reclaim for a rule whose warning is due at `warn_at`."""
        if now < warn_at:
            return None
        mine = [w for w in current if _FAMILY.get(w.rule, w.rule) == _FAMILY.get(rule, rule)]
        clock = Deadline(warn_at, reclaim_at)
        if not mine:
            at = max(reclaim_at, now + config.warning_lead)
            return decision("warn", rule, f"{what}; reclaim at {at.isoformat()} unless used",
                            at, measured=measured, deadline=clock)
        first = mine[0]
        due = max(reclaim_at, first.reclaim_at, first.t + config.warning_lead)
        clock = replace(clock, warned_at=first.t, due=due)
        if now < due:
            return decision("keep", rule, f"warned; reclaim at {due.isoformat()}",
                            measured=measured, deadline=clock)
        if config.pressure_only and pending_gpus <= 0:
            return decision("keep", rule, "no GPU requested by pending pods",
                            measured=measured, deadline=replace(clock, deferred=True))
        if latest.kernels is None:
            return decision("hold", "kernel-data-missing",
                            f"{what}, but the server did not report its kernels",
                            measured=measured, deadline=replace(clock, held_rule=rule))
        return decision("reclaim", rule, what, measured=measured, deadline=clock)

    # 5. hard lifetime
    if max_age_at is not None:
        measured = replace(measured, max_age_at=max_age_at)
        d = timed("max-age", max_age_at - config.warning_lead, max_age_at,
                  f"the session reaches its maximum age {_minutes(config.max_age)}")
        if d is not None:
            return d

    # 7. idleness, measured from the episode's start
    if idle_gpus and len(idle_gpus) < session.gpus:
        measured = replace(measured, idle_gpus=tuple(idle_gpus))
    since = episode_start.isoformat()
    gap = ""
    if bridged is not None:
        data, idle = ("kernel data", "") if shared else ("GPU data", "the GPU idle and ")
        gap = (f" (across a gap in the {data}, {bridged[0].isoformat()} to "
               f"{bridged[1].isoformat()}, with {idle}no kernel active on both sides)")
    if shared:
        rule, warn_after, reclaim_after = (
            "shared-gpu-idle-kernels", config.idle_warn_after, config.idle_reclaim_after)
        what = (f"no kernel or terminal of this server has worked since {since}{gap}; its GPU is "
                "shared, so the GPU's utilization is not this server's alone and does not count")
    elif cpu_since is not None:
        # a server on the wrong profile: CPU cells going on and on, the GPU untouched
        rule, warn_after, reclaim_after = CPU_WORK, config.cpu_work_warn_after, config.cpu_work_reclaim_after
        what = (f"this server has run only CPU work since {cpu_since.isoformat()}, its GPU unused since "
                "it started: a CPU profile would do; keep it alive if you are about to use the GPU")
    elif never_used:
        # a cell is a person there: from it the idle window, as after any use
        after_cell = h.last_busy is not None and h.last_busy >= episode_start > session.started
        rule, warn_after, reclaim_after = ("gpu-never-used", *(
            (config.idle_warn_after, config.idle_reclaim_after) if after_cell
            else (config.never_used_warn_after, config.never_used_reclaim_after)))
        what = f"GPU not used since {since}{gap}" + (", no cell run since" if after_cell else "")
    else:
        rule, warn_after, reclaim_after = (
            "gpu-idle", config.idle_warn_after, config.idle_reclaim_after)
        what = f"GPU idle since {since}{gap}"
    start = cpu_since if cpu_since is not None else episode_start
    warn_at, reclaim_at = start + warn_after, start + reclaim_after
    if rule == "gpu-idle" and (job := seen_before(h, latest, episode_start, intent)) is not None:
        seen, ended = job
        measured = replace(measured, last_seen=seen)
        if (seen <= episode_start - config.idle_reclaim_after
                and ended + config.unattended_reclaim_after <= reclaim_at):
            # the work ran with nobody there for the whole idle window: whoever started it
            # left longer ago than any lunch break, and nobody came since; the clock runs
            # from the job's own end (its last messages), not from its last busy sample
            rule = "job-ended-unattended"
            warn_at = min(warn_at, ended + config.unattended_warn_after)
            reclaim_at = ended + config.unattended_reclaim_after
            what = (f"the work on this GPU ended at {ended.isoformat()}{gap} with nobody there since "
                    f"{seen.isoformat()}; keep it alive if you will come back to its results")

    # 6. intent: it holds the reclaim, not the idle clock; the user named the time
    if intent_end is not None and intent_end > start:
        if intent_end - config.warning_lead > warn_at and rule != CPU_WORK:
            rule = "intent-ended"
            what = f"the keep-alive ends at {intent_end.isoformat()} and the GPU is unused since {since}{gap}"
        warn_at = max(warn_at, intent_end - config.warning_lead)
        reclaim_at = max(reclaim_at, intent_end + config.intent_grace)
        if intent_end > now and now < warn_at:
            return decision("keep", "intent", f"kept alive until {intent_end.isoformat()}",
                            measured=measured)

    d = timed(rule, warn_at, reclaim_at, what)
    if d is not None:
        return d
    if h.last_used == latest.t:
        if measured.idle_gpus is not None:
            return decision("keep", "gpu-partially-idle",
                            f"GPU in use; GPUs {idle_gpus} idle for "
                            f"{_minutes(config.idle_reclaim_after)} (reported, not reclaimed)",
                            measured=measured)
        return decision("keep", "gpu-active", "the GPU is in use", measured=measured)
    return decision("keep", rule, f"{what}; warning at {warn_at.isoformat()}", measured=measured)
