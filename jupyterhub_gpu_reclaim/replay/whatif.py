"""What if: the store's recorded history replayed under the live policy and under an
override of its settings, side by side (the admin page's "What if" form and
``POST api/admin/whatif``).

Both arms are the backtest's replay (`backtest.replay`) of the same trace
(`trace_export.export_records`), so they are compared like with like: the live arm is what
the live policy makes of the recorded samples, not what the service did (admins' exemptions
are not in the history). The override is read by the settings' one converter
(`policy.config.from_settings`) and changes the base policy as the service's option of that
name would: the policy rules are made again over it, so a rule that sets the same setting
still wins for its sessions.

What the history cannot tell: after a real reclaim a session has no more samples, so an
override cannot keep such a session longer than it ran.

Users interrupted: a reclaim after which the same server's kernels were busy again, in this
session's later samples (an override that reclaims earlier than the live policy did) or in
a later session of the same server (the user started it again), by how soon.

Idle GPU-hours: each decision that reads the session's GPUs as idle (its rule one of
`policy.IDLE_RULES`, as the admin page counts idle GPUs) counts the session's GPUs until its
next decision (at most ``stale_after``; the last one as long as the one before). Freed
GPU-hours: a reclaim frees the session's GPUs from then to its recorded end, as the backtest
counts them. Pure but for reading the store: no clock (``now`` is an argument), no writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from .backtest import policy_to_dict, replay
from ..durations import HOUR
from ..policy.observations import Decision, Session, SessionSample
from ..policy.decider import IDLE_RULES
from ..policy.config import PolicyConfig, from_settings
from ..policy.rules import PolicyRules
from ..store import Store
from ..timestamps import format_time
from .trace import Record, TraceConfig, TraceSession
from .trace_export import export_records

__all__ = ["MAX_PERIOD", "MAX_SETTING", "MAX_DIFFERENCES", "WhatIfError", "ArmSummary", "Treatment",
           "SessionDifference", "Bucket", "WhatIf", "override_policy", "what_if"]

#: the longest period replayed: a month of a big hub's cycles, twice, takes minutes
MAX_PERIOD = dt.timedelta(days=31)
#: the longest duration an override may set: beyond any session's life and the store's
#: retention, and within the dates the policy's arithmetic can reach (9999999d overflowed)
MAX_SETTING = dt.timedelta(days=366)
#: the sessions treated differently that a result lists (the count says how many in all)
MAX_DIFFERENCES = 500
#: bucket sizes of the chart's series: the smallest that makes at most MAX_BUCKETS
BUCKET_SIZES = tuple(dt.timedelta(hours=h) for h in (1, 3, 6, 12, 24))
MAX_BUCKETS = 48
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class WhatIfError(ValueError):
    """The what-if cannot run as asked (bad setting or value, bad period, no history): the
    message says why, naming the setting."""


@dataclass(frozen=True)
class ArmSummary:
    """One policy's totals over the period."""

    reclaims: int
    warnings: int
    gpu_hours_freed: float  # recovered: GPUs freed by its reclaims until the sessions' recorded end
    gpu_hours_idle: float  # GPUs held while that policy read them as idle
    gpu_hours_held: float  # the recorded GPU-hours less those freed
    # reclaims after which the user came back to that server (a later busy kernel), and per
    # rule: reclaims, GPU-hours freed, users interrupted, by how soon (`interruptions`)
    users_interrupted: int = 0
    returned: dict[str, int] = field(default_factory=dict)
    by_rule: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Treatment:
    """What one policy did to one session: its warnings and its reclaim."""

    warnings: int = 0
    first_warning: dt.datetime | None = None
    reclaimed_at: dt.datetime | None = None
    rule: str | None = None  # the reclaim's rule, else the first warning's
    gpu_hours_freed: float = 0.0


@dataclass(frozen=True)
class SessionDifference:
    """A session the override treats otherwise than the live policy."""

    session: str
    user: str
    server: str
    started: dt.datetime
    gpus: int
    live: Treatment
    override: Treatment


@dataclass(frozen=True)
class Bucket:
    """GPU-hours in [start, end) under each policy: idle (held, unused) and freed."""

    start: dt.datetime
    end: dt.datetime
    live_idle: float
    live_freed: float
    override_idle: float
    override_freed: float


@dataclass(frozen=True)
class WhatIf:
    since: dt.datetime
    until: dt.datetime
    settings: dict[str, Any]  # the override as the backtest's policy JSON writes it
    sessions: int  # session instances in the period
    samples: int
    gpu_hours_recorded: float  # what the sessions held as recorded, without any reclaim
    live: ArmSummary
    override: ArmSummary
    differences_total: int
    differences: list[SessionDifference]  # at most MAX_DIFFERENCES, the largest change first
    bucket: dt.timedelta
    series: list[Bucket]

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists (times as datetimes, for the API's JSON writer), the
        bucket in seconds."""
        out = dataclasses.asdict(self)
        out["bucket_seconds"] = int(out.pop("bucket").total_seconds())
        return out


# --------------------------------------------------------------------------- the override


def override_policy(live: PolicyConfig | PolicyRules, values: Mapping[str, Any]) -> PolicyRules:
    """The live policy with `values` (setting name → value as written in a policy file)
    for its base settings, the policy rules made again over it. WhatIfError names the
    setting (or the rule) when a name or value is not understood."""
    rules = live if isinstance(live, PolicyRules) else PolicyRules(live)
    if not values:
        raise WhatIfError("no setting to change: give at least one, e.g. idle_reclaim_after: 90m")
    try:
        base = from_settings(values, rules.base)
    except (TypeError, ValueError) as e:
        raise WhatIfError(_known(str(e))) from None
    for name in values:
        value = getattr(base, name)
        if isinstance(value, dt.timedelta) and value > MAX_SETTING:
            raise WhatIfError(f"{name}: {value.days:,} days is longer than a what-if replays: "
                              f"at most {_days(MAX_SETTING)}")
    remade = []
    for rule in rules.rules:
        try:
            remade.append(dataclasses.replace(rule, config=from_settings(rule.overrides, base)))
        except (TypeError, ValueError) as e:
            raise WhatIfError(f'with policy rule "{rule.name}": {e}') from None
    return PolicyRules(base, tuple(remade))


def _known(message: str) -> str:
    if message.startswith("unknown policy setting"):
        names = ", ".join(f.name for f in dataclasses.fields(PolicyConfig))
        return f"{message} (known: {names})"
    return message


# --------------------------------------------------------------------------- replaying


@dataclass
class _Instance:
    session: str
    started: dt.datetime
    gpus: int
    end: dt.datetime  # natural end: its stop, at most the period's end
    last_t: dt.datetime | None = None
    last_idle: bool = False
    last_step: dt.timedelta = dt.timedelta(0)
    warnings: int = 0
    first_warning: dt.datetime | None = None
    warn_rule: str | None = None
    reclaimed_at: dt.datetime | None = None
    rule: str | None = None


@dataclass
class _Arm:
    """One replay's per-session outcomes and its idle and freed GPU-hours per bucket."""

    report: dict[str, Any] = field(default_factory=dict)
    instances: dict[tuple[str, dt.datetime], _Instance] = field(default_factory=dict)
    idle: list[float] = field(default_factory=list)
    freed: list[float] = field(default_factory=list)
    samples: int = 0

    def outcome(self, key: tuple[str, dt.datetime]) -> Treatment:
        inst = self.instances.get(key)
        if inst is None:
            return Treatment()
        freed = 0.0
        if inst.reclaimed_at is not None:
            freed = round(inst.gpus * max(0.0, (inst.end - inst.reclaimed_at).total_seconds()) / HOUR.total_seconds(), 4)
        return Treatment(warnings=inst.warnings, first_warning=inst.first_warning,
                       reclaimed_at=inst.reclaimed_at, rule=inst.rule or inst.warn_rule,
                       gpu_hours_freed=freed)


class _Grid:
    """The buckets of [since, until): GPU-hours of an interval spread over those it overlaps."""

    def __init__(self, since: dt.datetime, until: dt.datetime) -> None:
        span = until - since
        self.size = next((s for s in BUCKET_SIZES if span / s <= MAX_BUCKETS), BUCKET_SIZES[-1])
        # whole hours (days) of UTC, so the chart's labels are round
        offset = (since - _EPOCH) % self.size
        self.origin = since - offset
        self.count = max(1, math.ceil((until - self.origin) / self.size))
        self.since, self.until = since, until

    def add(self, into: list[float], a: dt.datetime, b: dt.datetime, gpus: int) -> None:
        a, b = max(a, self.since), min(b, self.until)
        if b <= a:
            return
        i = int((a - self.origin) / self.size)
        while a < b and i < self.count:
            edge = min(b, self.origin + (i + 1) * self.size)
            into[i] += gpus * (edge - a).total_seconds() / HOUR.total_seconds()
            a, i = edge, i + 1

    def bounds(self, i: int) -> tuple[dt.datetime, dt.datetime]:
        return max(self.since, self.origin + i * self.size), min(self.until, self.origin + (i + 1) * self.size)


def _run(store: Store, since: dt.datetime, until: dt.datetime, config: PolicyConfig | PolicyRules,
         grid: _Grid, max_gap: dt.timedelta) -> _Arm:
    arm = _Arm(idle=[0.0] * grid.count, freed=[0.0] * grid.count)
    period_end = until

    def records() -> Iterator[Record]:
        nonlocal period_end
        for rec in export_records(store, since, until):
            if isinstance(rec, TraceConfig):
                period_end = rec.end
            elif isinstance(rec, TraceSession):
                end = min(rec.stopped, period_end) if rec.stopped is not None else period_end
                key = (rec.id, rec.session.started)
                arm.instances[key] = _Instance(rec.id, rec.session.started, rec.session.gpus, end)
            elif isinstance(rec, SessionSample):
                arm.samples += 1
            yield rec

    def recording(s: Session, now: dt.datetime, d: Decision) -> None:
        inst = arm.instances[(s.id, s.started)]
        if inst.last_t is not None:
            inst.last_step = now - inst.last_t
            if inst.last_idle:
                grid.add(arm.idle, inst.last_t, min(now, inst.last_t + max_gap), s.gpus)
        inst.last_t, inst.last_idle = now, d.action != "reclaim" and d.rule in IDLE_RULES
        if d.action == "warn":
            inst.warnings += 1
            if inst.first_warning is None:
                inst.first_warning, inst.warn_rule = now, d.rule
        elif d.action == "reclaim":
            inst.reclaimed_at, inst.rule = now, d.rule
            grid.add(arm.freed, now, inst.end, s.gpus)

    arm.report = replay(records(), config=config, on_decision=recording)
    for inst in arm.instances.values():  # the last decision of each session
        if inst.last_t is not None and inst.last_idle:
            grid.add(arm.idle, inst.last_t, min(inst.end, inst.last_t + min(inst.last_step, max_gap)), inst.gpus)
    return arm


def _summary(arm: _Arm) -> ArmSummary:
    s = arm.report["summary"]
    return ArmSummary(reclaims=s["reclaims"], warnings=s["warnings"],
                      gpu_hours_freed=round(s["gpu_hours_freed"], 2),
                      gpu_hours_idle=round(sum(arm.idle), 2),
                      gpu_hours_held=round(s["gpu_hours_held"] - s["gpu_hours_freed"], 2),
                      users_interrupted=s["users_interrupted"], returned=s["returned"],
                      by_rule=arm.report["by_rule"])


def _differences(live: _Arm, other: _Arm) -> list[SessionDifference]:
    out = []
    for key in live.instances.keys() | other.instances.keys():
        a, b = live.outcome(key), other.outcome(key)
        if a == b:
            continue
        inst = live.instances.get(key) or other.instances[key]
        user, _, server = inst.session.partition("/")
        out.append(SessionDifference(session=inst.session, user=user, server=server, started=inst.started,
                                     gpus=inst.gpus, live=a, override=b))
    out.sort(key=lambda d: (-abs(d.override.gpu_hours_freed - d.live.gpu_hours_freed),
                            d.session, d.started))
    return out


def check_period(since: dt.datetime, until: dt.datetime, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """[since, until] as replayed (until at most now); WhatIfError when it is empty,
    inverted or longer than MAX_PERIOD."""
    until = min(until, now)
    if since >= until:
        raise WhatIfError(f"the period is empty: from {format_time(since)} is not before "
                          f"{format_time(until)}" + (" (now)" if until == now else ""))
    if until - since > MAX_PERIOD:
        raise WhatIfError(f"the period is {_days(until - since)}: at most {_days(MAX_PERIOD)} is replayed")
    return since, until


def _days(span: dt.timedelta) -> str:
    days = span.total_seconds() / 86400
    return f"{days:.3g} days"


def what_if(store: Store, since: dt.datetime, until: dt.datetime, values: Mapping[str, Any], *,
            live: PolicyConfig | PolicyRules, now: dt.datetime) -> WhatIf:
    """Replay the store's observations of [since, until] under `live` and under `live`
    with the settings `values`; WhatIfError for a bad setting, value or period, or a period
    without observations. Reads the store twice (one replay each); can take long for a long
    period of a big hub: call it off the event loop."""
    changed = override_policy(live, values)
    since, until = check_period(since, until, now)
    grid = _Grid(since, until)
    base = live.base if isinstance(live, PolicyRules) else live
    max_gap = base.stale_after  # a decision's reading lasts until the data is stale, at most
    a = _run(store, since, until, live, grid, max_gap)
    if a.samples == 0:
        raise WhatIfError(f"the store has no observations from {format_time(since)} to {format_time(until)}")
    b = _run(store, since, until, changed, grid, max_gap)
    differences = _differences(a, b)
    series = [Bucket(*grid.bounds(i), live_idle=round(a.idle[i], 3), live_freed=round(a.freed[i], 3),
                     override_idle=round(b.idle[i], 3), override_freed=round(b.freed[i], 3))
              for i in range(grid.count)]
    settings = {k: v for k, v in policy_to_dict(changed.base).items() if k in values}
    return WhatIf(since=since, until=until, settings=settings,
                  sessions=a.report["trace"]["sessions"], samples=a.samples,
                  gpu_hours_recorded=round(a.report["summary"]["gpu_hours_held"], 2),
                  live=_summary(a), override=_summary(b),
                  differences_total=len(differences), differences=differences[:MAX_DIFFERENCES],
                  bucket=grid.size, series=series)
