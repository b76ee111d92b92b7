"""The reclaim policy: a pure, deterministic function of what is known about a session.

`decide(view, now=..., pending_gpus=..., config=...)` returns one `Decision`
(keep / warn / reclaim / hold) with the rule that fired, a sentence a user can read and
JSON-serialisable evidence. It does no I/O and never reads the clock: the live service and
`backtest` call the same code with their own `now`.

Precedence (first match wins):

1. **Servers without GPUs** (`gpus == 0`) follow jupyterhub-idle-culler 2.0 exactly
   (rules "idle-culler-timeout", "idle-culler-max-age"; see `_decide_without_gpu`). No
   warnings, no exemptions: idle-culler has neither, and one service replaces it.
2. **Exempt** user, group or profile: keep ("exempt").
3. **Missing or stale GPU data**: hold ("gpu-data-missing"); never warn, never reclaim
   (Princeton's Job Defense Shield never cancels on missing data).
4. **A busy kernel** in the latest sample: keep ("kernel-busy"). Work in progress.
5. **max_age** (optional hard lifetime of GPU sessions): warn `warning_lead` before
   `started + max_age`, reclaim at it ("max-age"). It also caps intents.
6. **Intent** ("keep alive until T", T capped at `set_at + max_keepalive` and at the
   max-age deadline): keep ("intent") while T > now.
7. **Idleness**: "gpu-never-used" (Yale: warn 30 min, reclaim 60 min) or "gpu-idle"
   (Princeton/Yale: warn 60 min, reclaim 120 min), measured from the start of the idle
   episode (see below). A warning always comes first; the reclaim happens no earlier than
   `warning_lead` after it and no earlier than the `reclaim_at` the warning announced.

What counts, and what does not:

* A GPU sample counts as *use* when any GPU is at or above `gpu_idle_threshold` percent.
* The hub's `last_activity` alone never keeps a GPU session: an open browser tab moves it.
* Terminal activity does not keep a GPU session either (a terminal can be an idle shell
  left open, and a process running in it that uses the GPU shows up as GPU use). It is
  reported in the evidence only. Only GPU use and busy kernels are work.
* A sample whose GPU data is missing (`gpu_util` null, or one GPU null, or the wrong number
  of GPUs) in the middle of the history is treated as *possible* use for the clocks: the
  idle episode restarts after it (we cannot say the GPU was idle then). It does not turn a
  never-used session into a used one.
* `kernels` null in the latest sample means the server did not answer: a reclaim that
  would otherwise happen becomes "hold" ("kernel-data-missing"). Warnings still go out.

Idle episodes and warnings. The episode of a session starts at the latest of: the session
start, the last GPU-use sample, the last busy-kernel sample, the last sample with missing
GPU data, and the moment the last intent ended (or was set, if later). Warnings in
`view.warnings` of the idle rules sent at or before the episode start belong to a finished
episode: they are ignored and the decision's evidence has `"episode_cleared": True` and
`"cleared_warnings"` (their times, ISO 8601); callers drop those warnings. "max-age"
warnings are never cleared (the lifetime does not restart). "warn" is emitted only when no
warning of the same rule exists in the current episode; a warned session waiting for its
reclaim time gets "keep" with the rule of the episode and evidence `warned_at`,
`reclaim_at`.

Samples the caller must pass (window). Decisions depend on: the latest sample; for each GPU
the latest sample where it was in use; the latest busy-kernel sample; the latest sample
with missing GPU data; and (for the evidence only) the samples of the last
`idle_reclaim_after`. Passing all samples since the session started is always correct;
`retained_samples()` returns the minimal subset, so a caller that keeps
`retained_samples(kept + new, now=now, config=config)` each cycle gives the same decisions
with O(window) work per decision instead of O(session length).

Samples, warnings and intents dated after `now` are ignored (not yet observed).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable, overload

from .observations import Decision, Intent, Sample, SessionView
from .policy_config import PolicyConfig

MINUTE = dt.timedelta(minutes=1)

# Rules whose warnings belong to an idle episode (cleared by activity or an intent).
IDLE_RULES = frozenset({"gpu-never-used", "gpu-idle"})


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


@overload
def _latest(first: dt.datetime, /, *times: dt.datetime | None) -> dt.datetime: ...
@overload
def _latest(*times: dt.datetime | None) -> dt.datetime | None: ...
def _latest(*times: dt.datetime | None) -> dt.datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def _gpu_util(sample: Sample, gpus: int) -> tuple[float, ...] | str:
    """This sample's utilization, one value per GPU of the session, or why it cannot be judged."""
    util = sample.gpu_util
    if util is None:
        return "no GPU utilization in the sample"
    known = tuple(u for u in util if u is not None)
    if len(known) != len(util):
        return "no data for some GPUs"
    if len(util) != gpus:
        return f"utilization for {len(util)} GPUs, the session holds {gpus}"
    return known


def _kernel_busy(sample: Sample) -> bool:
    return any(k.execution_state == "busy" for k in sample.kernels or ())


def _intent_end(intent: Intent, config: PolicyConfig, max_age_at: dt.datetime | None) -> dt.datetime:
    """When the intent stops protecting the session: capped by max_keepalive and max_age."""
    end = min(intent.until, intent.set_at + config.max_keepalive)
    if max_age_at is not None:
        end = min(end, max_age_at)
    return end


@dataclass
class _History:
    """One pass over the samples: the landmarks the rules need."""

    last_used: dt.datetime | None = None  # any GPU >= threshold
    last_used_per_gpu: list[dt.datetime | None] = field(default_factory=list)
    last_busy: dt.datetime | None = None  # a busy kernel
    last_unknown: dt.datetime | None = None  # GPU data missing in a sample
    window_max: list[float | None] = field(default_factory=list)
    window_samples: int = 0


def _scan(samples: list[Sample], gpus: int, now: dt.datetime, config: PolicyConfig) -> _History:
    h = _History(last_used_per_gpu=[None] * gpus, window_max=[None] * gpus)
    window_start = now - config.idle_reclaim_after
    threshold = config.gpu_idle_threshold
    for s in samples:
        in_window = s.t > window_start
        if in_window:
            h.window_samples += 1
        if _kernel_busy(s):
            h.last_busy = s.t
        util = _gpu_util(s, gpus)
        if isinstance(util, str):
            h.last_unknown = s.t
            continue
        for i, u in enumerate(util):
            if u >= threshold:
                h.last_used = s.t
                h.last_used_per_gpu[i] = s.t
            top = h.window_max[i]
            if in_window and (top is None or u > top):
                h.window_max[i] = float(u)
    return h


def retained_samples(
    samples: Iterable[Sample], *, now: dt.datetime, config: PolicyConfig, gpus: int
) -> tuple[Sample, ...]:
    """The subset of `samples` (oldest first) that `decide` needs at `now` and later.

    Keeps the samples of the last `idle_reclaim_after`, the latest sample, and the landmark
    samples: per GPU the latest one where it was in use, the latest with a busy kernel, the
    latest with missing GPU data. Deciding on the result gives the same decision as
    deciding on all samples (evidence included), at this `now` and at any later one once
    newer samples are appended. Samples after `now` are kept as they are."""
    samples = list(samples)
    if gpus <= 0:
        return tuple(samples[-1:])
    window_start = now - config.idle_reclaim_after
    keep: set[int] = set()
    last_used: list[int | None] = [None] * gpus
    last_busy = last_unknown = None
    for k, s in enumerate(samples):
        if s.t > window_start:
            keep.add(k)
            continue
        if _kernel_busy(s):
            last_busy = k
        util = _gpu_util(s, gpus)
        if isinstance(util, str):
            last_unknown = k
            continue
        for i, u in enumerate(util):
            if u >= config.gpu_idle_threshold:
                last_used[i] = k
    keep.update(k for k in (*last_used, last_busy, last_unknown) if k is not None)
    if samples:
        keep.add(len(samples) - 1)
    return tuple(samples[k] for k in sorted(keep))


def decide(
    view: SessionView, *, now: dt.datetime, pending_gpus: int, config: PolicyConfig
) -> Decision:
    """Decide what to do with one session at `now`. Pure: same inputs, same decision."""
    session = view.session
    samples = [s for s in view.samples if s.t <= now]
    if session.gpus <= 0:
        return _decide_without_gpu(view, samples, now=now, config=config)

    def decision(_action, _rule, _reason, _reclaim_at=None, **evidence) -> Decision:
        return Decision(session.id, _action, _rule, _reason, _reclaim_at, evidence)

    # 2. exemptions
    if session.user in config.exempt_users:
        return decision("keep", "exempt", f"user {session.user} is exempt", exempt="user")
    groups = sorted(session.groups & config.exempt_groups)
    if groups:
        return decision("keep", "exempt", f"group {groups[0]} is exempt", exempt="group",
                        groups=groups)
    if session.profile and session.profile in config.exempt_profiles:
        return decision("keep", "exempt", f"profile {session.profile} is exempt",
                        exempt="profile")

    # 3. missing or stale GPU data
    latest = samples[-1] if samples else None
    if latest is None:
        util: tuple[float, ...] | str = "no GPU samples"
    elif now - latest.t > config.stale_after:
        util = f"the latest GPU sample is {_minutes(now - latest.t)} old"
    else:
        util = _gpu_util(latest, session.gpus)
    if isinstance(util, str):
        return decision("hold", "gpu-data-missing",
                        f"GPU data missing ({util}); never reclaimed on missing data",
                        latest_sample=_iso(latest.t if latest else None), problem=util)
    assert latest is not None

    h = _scan(samples, session.gpus, now, config)
    max_age_at = session.started + config.max_age if config.max_age else None
    intent = view.intent if view.intent is not None and view.intent.set_at <= now else None
    intent_end = _intent_end(intent, config, max_age_at) if intent else None

    episode_start = _latest(session.started, h.last_used, h.last_busy, h.last_unknown,
                            max(intent.set_at, intent_end) if intent and intent_end else None)
    warnings = [w for w in view.warnings if w.t <= now]
    cleared = [w for w in warnings if w.rule in IDLE_RULES and w.t <= episode_start]
    current = [w for w in warnings if w not in cleared]

    never_used = h.last_used is None
    idle_gpus = [
        i for i, t in enumerate(h.last_used_per_gpu)
        if _latest(session.started, t) <= now - config.idle_reclaim_after
    ]
    evidence: dict[str, Any] = {
        "gpus": session.gpus,
        "latest_sample": _iso(latest.t),
        "samples_considered": h.window_samples,
        "window_minutes": config.idle_reclaim_after.total_seconds() / 60,
        "window_max_util": h.window_max,
        "latest_util": [float(u) for u in util],
        "never_used": never_used,
        "last_used": _iso(h.last_used),
        "last_busy_kernel": _iso(h.last_busy),
        "last_gpu_data_missing": _iso(h.last_unknown),
        "idle_since": _iso(episode_start),
        "hub_last_activity": _iso(latest.hub_last_activity),
        "terminal_last_activity": _iso(_latest(*(latest.terminals or ()))),
    }
    if cleared:
        evidence["episode_cleared"] = True
        evidence["cleared_warnings"] = [_iso(w.t) for w in cleared]
    if intent is not None:
        evidence["intent_until"] = _iso(intent.until)
        evidence["intent_end"] = _iso(intent_end)
        evidence["intent_capped"] = intent_end != intent.until

    # 4. a busy kernel is work in progress
    if _kernel_busy(latest):
        return decision("keep", "kernel-busy", "a kernel is busy: work in progress", **evidence)

    def timed(rule: str, warn_at: dt.datetime, reclaim_at: dt.datetime, what: str) -> Decision | None:
        """Warn / wait / reclaim for a rule whose warning is due at `warn_at`."""
        if now < warn_at:
            return None
        mine = [w for w in current if w.rule == rule]
        ev = dict(evidence, rule_warn_at=_iso(warn_at), rule_reclaim_at=_iso(reclaim_at))
        if not mine:
            at = max(reclaim_at, now + config.warning_lead)
            return decision("warn", rule, f"{what}; reclaim at {at.isoformat()} unless used",
                            at, **ev)
        first = mine[0]
        due = max(reclaim_at, first.reclaim_at, first.t + config.warning_lead)
        ev.update(warned_at=_iso(first.t), reclaim_at=_iso(due))
        if now < due:
            return decision("keep", rule, f"warned; reclaim at {due.isoformat()}", **ev)
        if config.pressure_only and pending_gpus <= 0:
            return decision("keep", rule, "no GPU requested by pending pods",
                            reclaim_deferred=True, **ev)
        if latest.kernels is None:
            return decision("hold", "kernel-data-missing",
                            f"{what}, but the server did not report its kernels",
                            episode_rule=rule, **ev)
        return decision("reclaim", rule, what, **ev)

    # 5. hard lifetime
    if max_age_at is not None:
        evidence["max_age_at"] = _iso(max_age_at)
        d = timed("max-age", max_age_at - config.warning_lead, max_age_at,
                  f"the session reaches its maximum age {_minutes(config.max_age)}")
        if d is not None:
            return d

    # 6. intent
    if intent_end is not None and intent_end > now:
        return decision("keep", "intent", f"kept alive until {intent_end.isoformat()}",
                        **evidence)

    # 7. idleness
    if idle_gpus and len(idle_gpus) < session.gpus:
        evidence["idle_gpus"] = idle_gpus
    if never_used:
        rule, warn_after, reclaim_after = (
            "gpu-never-used", config.never_used_warn_after, config.never_used_reclaim_after)
        what = f"GPU not used since {episode_start.isoformat()}"
    else:
        rule, warn_after, reclaim_after = (
            "gpu-idle", config.idle_warn_after, config.idle_reclaim_after)
        what = f"GPU idle since {episode_start.isoformat()}"
    d = timed(rule, episode_start + warn_after, episode_start + reclaim_after, what)
    if d is not None:
        return d
    if h.last_used == latest.t:
        if "idle_gpus" in evidence:
            return decision("keep", "gpu-partially-idle",
                            f"GPU in use; GPUs {idle_gpus} idle for "
                            f"{_minutes(config.idle_reclaim_after)} (reported, not reclaimed)",
                            **evidence)
        return decision("keep", "gpu-active", "the GPU is in use", **evidence)
    return decision("keep", rule,
                    f"{what}; warning at {(episode_start + warn_after).isoformat()}",
                    **evidence)


def _decide_without_gpu(
    view: SessionView, samples: list[Sample], *, now: dt.datetime, config: PolicyConfig
) -> Decision:
    """jupyterhub-idle-culler 2.0's `handle_server`, for one ready server.

    inactive = now - last_activity (the latest sample's hub_last_activity; `started` when
    there is none); cull when inactive >= timeout (idle-culler compares with >=) and the
    server kind (default / named) is culled. Otherwise, when max-age is set (non-zero),
    cull when now - started >= max_age, whatever the server kind. Admin servers are culled
    like others (--cull-admin-users only concerns deleting users)."""
    session = view.session
    latest = samples[-1] if samples else None
    last_activity = latest.hub_last_activity if latest is not None else None
    inactive = now - (last_activity or session.started)
    age = now - session.started
    evidence = {
        "gpus": session.gpus,
        "hub_last_activity": _iso(last_activity),
        "inactive_s": inactive.total_seconds(),
        "age_s": age.total_seconds(),
        "admin": session.admin,
    }
    kind_culled = config.cull_named_servers if session.server else config.cull_default_servers
    if inactive.total_seconds() >= config.cpu_timeout.total_seconds() and kind_culled:
        return Decision(session.id, "reclaim", "idle-culler-timeout",
                        f"inactive for {_minutes(inactive)} (timeout {_minutes(config.cpu_timeout)})",
                        None, evidence)
    if config.cpu_max_age and age.total_seconds() >= config.cpu_max_age.total_seconds():
        return Decision(session.id, "reclaim", "idle-culler-max-age",
                        f"age {_minutes(age)} (max age {_minutes(config.cpu_max_age)})",
                        None, evidence)
    return Decision(session.id, "keep", "idle-culler",
                    f"inactive for {_minutes(inactive)}, under the timeout", None, evidence)


def decide_user(
    *, admin: bool, created: dt.datetime | None, last_activity: dt.datetime | None,
    now: dt.datetime, config: PolicyConfig
) -> tuple[bool, str]:
    """jupyterhub-idle-culler 2.0's user rule (--cull-users), for a user none of whose
    servers is running: delete when inactive (now - last_activity, else now - created)
    >= timeout and the user is not an admin unless cull_admin_users; else when max-age is
    set and now - created >= max age. Returns (delete?, why)."""
    age = now - created if created is not None else None
    inactive = now - last_activity if last_activity is not None else age
    if inactive is not None and inactive >= config.cpu_timeout and (config.cull_admin_users or not admin):
        return True, f"inactive for {_minutes(inactive)} (timeout {_minutes(config.cpu_timeout)})"
    if config.cpu_max_age and age is not None and age >= config.cpu_max_age:
        return True, f"age {_minutes(age)} (max age {_minutes(config.cpu_max_age)})"
    return False, f"inactive for {_minutes(inactive)}" if inactive is not None else "no activity recorded"


def _minutes(td: dt.timedelta | None) -> str:
    if td is None:
        return "-"
    minutes = td.total_seconds() / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
