"""Backtest: replay a session trace through the reclaim policy on a virtual clock.

The same :func:`jupyterhub_gpu_reclaim.policy.decider.decide` the service calls is called here, at
every sample instant of every session, with the :class:`SessionView` the service would
have built at that moment. The report is the JSON object of docs/trace-format.md ("Backtest output").

How the replay works (choices the format leaves open):

- Events are taken in file order, grouped by time: at each instant the ``session``,
  ``pressure`` and ``intent`` lines of that instant are applied first, then every session
  with a sample at that instant is decided. ``pending_gpus`` is the latest ``pressure``
  value at or before the instant (0 before the first).
- A session's view holds its samples since it started, oldest first. To keep memory and
  time bounded the replay keeps only what ``policy.retained_samples`` says the policy's
  decisions depend on (the window of the last ``idle_reclaim_after`` plus landmark samples);
  it trims whenever the kept list has doubled, so trimming costs O(1) per sample amortized.
  Tests check that every decision equals the one made with all samples (``compact=False``).
- An ``intent`` line sets ``Intent(until, set_at=t)`` (``until: null`` clears it). Capping at
  ``max_keepalive`` and expiry are the policy's business.
- Each session at each instant is one ``policy.step``, as in the service: its warnings after
  the step (those the decision cleared dropped, its own added) are passed back to the policy
  in later views. Every ``warn`` decision is a warning sent: it goes to the report.
- A ``reclaim`` ends the session: later samples are ignored. ``gpu_hours_freed`` is
  ``gpus × (natural end − T)`` in hours, the natural end being the session's ``stopped``
  (at most the trace's ``end``) or the trace's ``end``. Samples at or after the natural
  end are ignored.
- ``hold`` decisions are recorded once per run: consecutive holds of the same session for
  the same reason (the decision's rule, e.g. ``gpu-data-missing``) make one entry whose
  ``t`` is the first held instant; ``last`` is the last held instant and ``samples`` how
  many decisions the run covered. Any other decision ends the run.
- ``summary.gpu_hours_held`` is the GPU-hours all sessions held during the trace as
  recorded (without any reclaim): ``gpus × (natural end − max(started, trace start))``.
- ``score`` (only when the trace has labels): ``false_reclaims`` counts reclaims at a time
  inside a ``must_keep`` label of that session; ``gray_reclaims`` those inside a ``gray``
  label; ``reclaimable_gpu_hours`` is the GPU-hours of all ``reclaimable`` labels (clipped
  to the session's life in the trace); ``reclaimable_gpu_hours_recovered`` the part of them
  after the reclaim time; ``recovered_share`` their ratio (null when nothing is labelled
  reclaimable); ``unwarned_reclaims`` counts reclaims with no warning of the session's
  current idle episode sent before them (what users must never see).
- ``scenarios`` (only when session lines carry a ``scenario``, as generated traces do):
  for each kind of session (``(none)`` for sessions without one), its ``sessions`` and,
  for ``policy`` and each baseline, its ``reclaims`` and the ``score`` fields above
  computed on that kind's sessions alone; the kinds add up to the totals.
- The policy is ``PolicyConfig``'s defaults but one (`BACKTEST_POLICY`): servers without
  GPUs are culled after the z2jh chart's ``cull.timeout`` (`Z2JH_CULL_TIMEOUT`) rather than
  idle-culler's own default, as on the hubs whose sessions are replayed; a policy file's
  ``cpu_timeout`` overrides it.
- ``baselines``: what two reference rules do on the same samples, with the same scoring.
  ``idle-culler``: jupyterhub-idle-culler's rule as the z2jh chart runs it, reclaim when
  ``now − hub_last_activity`` (or ``started`` when the hub reports none) exceeds
  `Z2JH_CULL_TIMEOUT`; it never looks at GPUs, kernels or intents. ``zero-gpu-2h``: the naive GPU rule, reclaim when every GPU of the session
  read 0% in every sample for 2 h (a sample without GPU data breaks the run); no warnings,
  no kernel check, no intents. Both are evaluated at every sample, like the policy; neither
  warns, so each of their reclaims is unwarned.
- Users interrupted (`interruptions`): each reclaim's ``user_returned`` is the first later
  sample of the same server (this session or a later one of its id) with a busy kernel, or
  null, and ``returned`` its bucket (``under_30m``, ``under_2h``, ``under_8h``, ``later``,
  ``never``); ``by_rule`` gives per rule the reclaims, GPU-hours freed, ``users_interrupted``
  (reclaims the user came back after) and the buckets; ``summary`` and each baseline the
  same totals.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable

from . import interruptions
from ..durations import HOUR
from ..errors import ConfigError
from ..policy.config import PolicyConfig
from ..policy.observations import (
    Decision, Intent, IntentChange, Pressure, Sample, Session, SessionSample, SessionView, Warning,
)
from ..timestamps import format_time
from .backtest_entries import FalseReclaim, HoldRun, ReclaimEntry, WarningEntry
from .trace import Label, Record, TraceConfig, TraceError, TraceSession, read_trace

__all__ = [
    "backtest",
    "replay",
    "idle_culler_rule",
    "zero_gpu_rule",
    "ZeroRun",
    "policy_to_dict",
    "load_policy_config",
]

#: idle-culler's --timeout as the z2jh chart passes it (its values.yaml's cull.timeout): the
#: backtest's hubs run z2jh, so its policy culls servers without GPUs after it, and so does
#: the idle-culler reference rule (idle-culler's own default, and the service's, is 600 s)
Z2JH_CULL_TIMEOUT = dt.timedelta(seconds=3600)
#: the policy a backtest replays unless its policy file says otherwise
BACKTEST_POLICY = PolicyConfig(cpu_timeout=Z2JH_CULL_TIMEOUT)
ZERO_GPU_AFTER = dt.timedelta(hours=2)


# --------------------------------------------------------------------------- reference rules


def idle_culler_rule(session: Session, sample: Sample, now: dt.datetime,
                     timeout: dt.timedelta = Z2JH_CULL_TIMEOUT) -> bool:
    """jupyterhub-idle-culler's decision for one server: cull when the hub's
    ``last_activity`` (``started`` when there is none) is more than ``timeout`` ago."""
    last = sample.hub_last_activity or session.started
    return now - last > timeout


@dataclass
class ZeroRun:
    """State of the naive rule for one session: since when every GPU reads 0%."""

    since: dt.datetime | None = None


def zero_gpu_rule(state: ZeroRun, sample: Sample, now: dt.datetime,
                  after: dt.timedelta = ZERO_GPU_AFTER) -> bool:
    """The naive rule: reclaim when all GPUs read exactly 0% in every sample for ``after``.
    A sample without GPU data (null, or null for one GPU) or with any GPU above 0 ends the
    run. Call once per sample, in time order."""
    util = sample.gpu_util
    if util and all(u is not None and u <= 0.0 for u in util):
        if state.since is None:
            state.since = sample.t
        return now - state.since >= after
    state.since = None
    return False


# --------------------------------------------------------------------------- replay


@dataclass
class _Live:
    """One session instance during the replay."""

    rec: TraceSession
    natural_end: dt.datetime
    policy: Any  # policy.rules.AppliedPolicy: its policy rule's settings, else the base policy's
    samples: list[Sample] = field(default_factory=list)
    intent: Intent | None = None
    warnings: list[Warning] = field(default_factory=list)
    reclaimed: bool = False
    hold: int | None = None  # its run of holds going on: the run's index in the report's holds
    trim_at: int = 32  # trim the kept samples (policy.retained_samples) past this many
    # reference rules: name → its reclaim, the user's return watched
    baselines: dict[str, interruptions.Watched] = field(default_factory=dict)
    zero: ZeroRun = field(default_factory=ZeroRun)


@dataclass(frozen=True)
class _Reclaim:
    """A reclaim scored against the labels: of which instance, when, and whether a warning of
    its idle episode came before it (the reference rules never warn)."""

    inst: _Live
    t: dt.datetime
    warned: bool = False


@dataclass(frozen=True)
class _PolicyReclaim:
    """A reclaim of the policy's: scored, listed in the report as `entry` (until the user's
    return is known), its user's return watched."""

    scored: _Reclaim
    entry: ReclaimEntry
    watch: interruptions.Watched


BASELINES = ("idle-culler", "zero-gpu-2h")  # the rules every report compares the policy with


def _hours(a: dt.datetime, b: dt.datetime) -> float:
    return max(0.0, (b - a).total_seconds() / HOUR.total_seconds())


def replay(records: Iterable[Record], *, config: Any = None,
           decide: Callable[..., Any] | None = None, compact: bool = True,
           on_decision: Callable[[Session, dt.datetime, Decision], None] | None = None) -> dict[str, Any]:
    """Replay trace records (a :func:`read_trace` stream, config first) through
    ``policy.step`` with ``decide`` (default: the policy's) under ``config`` (default:
    `BACKTEST_POLICY`; a `policy_rules.PolicyRules`: each session under its first matching
    rule's policy, its warnings and reclaims naming the rule); ``on_decision`` sees each
    decision; return the report."""
    from ..policy.rules import AppliedPolicy, PolicyRules
    from ..policy.scan import retained_samples
    from ..policy.step import step

    rules = config if isinstance(config, PolicyRules) else None
    config = rules.base if rules is not None else config if config is not None else BACKTEST_POLICY

    it = iter(records)
    trace_config = next(it, None)
    if not isinstance(trace_config, TraceConfig):
        raise TraceError("the trace has no config line")
    end = trace_config.end

    live: dict[str, _Live] = {}
    instances: list[_Live] = []
    labels: list[Label] = []
    warnings: list[WarningEntry] = []
    reclaims: list[_PolicyReclaim] = []
    returns = interruptions.Watch()
    holds: list[HoldRun] = []
    pending = 0
    batch: list[tuple[_Live, Sample]] = []
    batch_t: dt.datetime | None = None

    def flush() -> None:
        for inst, sample in batch:
            _decide(inst, sample)
        batch.clear()

    def _decide(inst: _Live, sample: Sample) -> None:
        now = sample.t
        session = inst.rec.session
        returns.sample(session.id, sample)
        if now >= inst.natural_end:
            return
        # reference rules see every sample of the recorded session
        if "idle-culler" not in inst.baselines and idle_culler_rule(session, sample, now):
            inst.baselines["idle-culler"] = returns.reclaimed(session.id, now)
        if session.gpus > 0 and "zero-gpu-2h" not in inst.baselines \
                and zero_gpu_rule(inst.zero, sample, now):
            inst.baselines["zero-gpu-2h"] = returns.reclaimed(session.id, now)
        if inst.reclaimed:
            return
        samples = inst.samples
        samples.append(sample)
        if compact and len(samples) > inst.trim_at:
            samples[:] = retained_samples(samples, now=now, config=inst.policy.config, gpus=session.gpus,
                                          shared=session.gpu_shared)
            inst.trim_at = 2 * len(samples) + 32
        view = SessionView(session=session, samples=tuple(samples), intent=inst.intent,
                           warnings=tuple(inst.warnings))
        done = step(view, now=now, pending_gpus=pending, policy=inst.policy, decide=decide)
        d = done.decision
        if on_decision is not None:
            on_decision(session, now, d)
        inst.warnings = list(done.warnings)
        action = d.action
        if action == "hold":
            if inst.hold is not None and holds[inst.hold].reason == d.rule:
                holds[inst.hold] = holds[inst.hold].extended(now)
            else:
                inst.hold = len(holds)
                holds.append(HoldRun(session=session.id, t=now, reason=d.rule, last=now))
            return
        inst.hold = None
        if action == "warn":
            assert d.reclaim_at is not None  # a "warn" always says when
            warnings.append(WarningEntry(session=session.id, t=now, rule=d.rule, reclaim_at=d.reclaim_at,
                                         policy_rule=d.policy_rule, under_rules=d.under_rules))
        elif action == "reclaim":
            inst.reclaimed = True
            inst.samples = []
            freed = session.gpus * _hours(now, inst.natural_end)
            warned = any(w.t < now for w in inst.warnings)  # a warning of this episode came first
            entry = ReclaimEntry(session=session.id, t=now, rule=d.rule, gpus=session.gpus,
                                 gpu_hours_freed=round(freed, 6), policy_rule=d.policy_rule,
                                 under_rules=d.under_rules)
            reclaims.append(_PolicyReclaim(scored=_Reclaim(inst, now, warned), entry=entry,
                                           watch=returns.reclaimed(session.id, now)))
        elif action != "keep":
            raise ValueError(f"policy returned an unknown action {action!r}")

    for rec in it:
        if isinstance(rec, SessionSample):
            if batch_t is not None and rec.sample.t != batch_t:
                flush()
            batch_t = rec.sample.t
            batch.append((live[rec.session], rec.sample))
            continue
        if isinstance(rec, Label):
            labels.append(rec)
            continue
        if isinstance(rec, TraceConfig):  # pragma: no cover - the reader yields it once, first
            raise TypeError(f"a second config record {rec!r}")
        t = rec.t
        if batch and t != batch_t:
            flush()
        if isinstance(rec, TraceSession):
            natural_end = min(rec.stopped, end) if rec.stopped is not None else end
            applied = rules.applied(rec.session) if rules is not None else AppliedPolicy(config)
            inst = _Live(rec=rec, natural_end=natural_end, policy=applied)
            live[rec.id] = inst
            instances.append(inst)
        elif isinstance(rec, Pressure):
            pending = rec.pending_gpus
        elif isinstance(rec, IntentChange):
            inst = live[rec.session]
            inst.intent = (Intent(session=rec.session, until=rec.until, set_at=rec.t)
                           if rec.until is not None else None)
        else:  # pragma: no cover - the reader yields nothing else
            raise TypeError(f"unexpected record {rec!r}")
    flush()

    start = trace_config.start
    held = sum(i.rec.session.gpus * _hours(max(i.rec.session.started, start), i.natural_end)
               for i in instances)
    entries = [dataclasses.replace(r.entry, user_returned=r.watch.returned) for r in reclaims]
    freed = sum(e.gpu_hours_freed for e in entries)
    by_rule = interruptions.by_rule((e.rule, e.gpu_hours_freed, e.returned) for e in entries)
    returned = interruptions.counts(e.returned for e in entries)
    report: dict[str, Any] = {
        "trace": {"sessions": len(instances), "start": format_time(start), "end": format_time(end)},
        "policy": policy_to_dict(config),
        **({"policy_rules": rules.names} if rules is not None else {}),
        "warnings": [w.to_dict() for w in warnings],
        "reclaims": [e.to_dict() for e in entries],
        "holds": [h.to_dict() for h in holds],
        "summary": {"gpu_hours_held": round(held, 6), "gpu_hours_freed": round(freed, 6),
                    "reclaims": len(reclaims), "warnings": len(warnings),
                    "users_interrupted": interruptions.interrupted(returned), "returned": returned},
        "by_rule": by_rule,
    }
    scored: dict[str, list[_Reclaim]] = {"policy": [r.scored for r in reclaims]}
    if labels:
        report["score"] = _score(scored["policy"], instances, labels, start)
    baselines = {}
    for name in BASELINES:
        # neither reference rule warns
        done = [_Reclaim(i, i.baselines[name].reclaimed) for i in instances if name in i.baselines]
        scored[name] = done
        back = interruptions.counts(r.inst.baselines[name].bucket for r in done)
        b: dict[str, Any] = {
            "reclaims": len(done),
            "gpu_hours_freed": round(sum(r.inst.rec.session.gpus * _hours(r.t, r.inst.natural_end)
                                         for r in done), 6),
            "users_interrupted": interruptions.interrupted(back), "returned": back,
        }
        if labels:
            s = _score(done, instances, labels, start)
            b.update({k: s[k] for k in ("false_reclaims", "unwarned_reclaims", "gray_reclaims",
                                        "reclaimable_gpu_hours_recovered", "recovered_share")})
        baselines[name] = b
    report["baselines"] = baselines
    if any(i.rec.scenario is not None for i in instances):
        report["scenarios"] = _by_scenario(scored, instances, labels, start)
    return report


NO_SCENARIO = "(none)"


def _by_scenario(scored: dict[str, list[_Reclaim]], instances: list[_Live], labels: list[Label],
                 trace_start: dt.datetime) -> dict[str, Any]:
    """The score of each kind of session (the session lines' ``scenario``), for the policy
    and each reference rule: every session in exactly one kind, so the kinds sum to the totals."""
    kinds: dict[str, list[_Live]] = {}
    for inst in instances:
        kinds.setdefault(inst.rec.scenario or NO_SCENARIO, []).append(inst)
    out: dict[str, Any] = {}
    for kind, members in sorted(kinds.items()):
        mine = {id(i) for i in members}
        entry: dict[str, Any] = {"sessions": len(members)}
        for name, done in scored.items():
            subset = [r for r in done if id(r.inst) in mine]
            s = _score(subset, members, labels, trace_start)
            del s["false_reclaim_list"]
            entry[name] = {"reclaims": len(subset), **s}
        out[kind] = entry
    return out


def _score(reclaims: list[_Reclaim], instances: list[_Live],
           labels: list[Label], trace_start: dt.datetime) -> dict[str, Any]:
    by_id: dict[str, list[Label]] = {}
    for label in labels:
        by_id.setdefault(label.session, []).append(label)

    def life(inst: _Live) -> tuple[dt.datetime, dt.datetime]:
        return max(inst.rec.session.started, trace_start), inst.natural_end

    reclaimable = 0.0
    for inst in instances:
        lo, hi = life(inst)
        for label in by_id.get(inst.rec.id, ()):
            if label.truth == "reclaimable":
                reclaimable += inst.rec.session.gpus * _hours(max(lo, label.from_), min(hi, label.to))
    false: list[FalseReclaim] = []
    gray, recovered = 0, 0.0
    for r in reclaims:
        inst, t = r.inst, r.t
        lo, hi = life(inst)
        for label in by_id.get(inst.rec.id, ()):
            inside = label.from_ <= t < label.to
            if label.truth == "must_keep" and inside:
                false.append(FalseReclaim(session=inst.rec.id, t=t, label_from=label.from_, label_to=label.to))
            elif label.truth == "gray" and inside:
                gray += 1
            elif label.truth == "reclaimable":
                recovered += inst.rec.session.gpus * _hours(max(lo, t, label.from_), min(hi, label.to))
    return {
        "false_reclaims": len(false),
        "false_reclaim_list": [f.to_dict() for f in false],
        "unwarned_reclaims": sum(1 for r in reclaims if not r.warned),
        "gray_reclaims": gray,
        "reclaimable_gpu_hours": round(reclaimable, 6),
        "reclaimable_gpu_hours_recovered": round(recovered, 6),
        "recovered_share": round(recovered / reclaimable, 4) if reclaimable > 0 else None,
    }


def backtest(trace: str | os.PathLike | IO[str], *, config: Any = None,
             decide: Callable[..., Any] | None = None, compact: bool = True) -> dict[str, Any]:
    """Read a trace file and replay it; raises TraceError on a bad line."""
    return replay(read_trace(trace), config=config, decide=decide, compact=compact)


# --------------------------------------------------------------------------- policy config


def policy_to_dict(config: Any) -> dict[str, Any]:
    """The effective policy as JSON: durations in seconds, sets as sorted lists."""
    if not dataclasses.is_dataclass(config):
        return {}
    out = {}
    for f in dataclasses.fields(config):
        out[f.name] = _jsonable(getattr(config, f.name))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
        return int(seconds) if seconds.is_integer() else seconds
    if isinstance(value, (frozenset, set)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return format_time(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def load_policy_config(path: str | os.PathLike, base: Any = None) -> Any:
    """A JSON or YAML file of overrides of `base` (default `BACKTEST_POLICY`) → the
    PolicyConfig, or, when the file has ``rules``, the `policy_rules.PolicyRules` over it.

    ``{"gpu_idle_threshold": 9, "idle_reclaim_after": "2h", "exempt_users": ["alice"]}``,
    read as the service reads its options (`policy.from_settings`): durations are seconds
    or "30m"/"2h"; ``null`` (or 0) where the field allows it (``max_age``). ``rules``: a list
    of policy rules as the service's --policy-rules file holds them (docs/policy.md).
    Unknown keys, bad values and bad rules raise :class:`ConfigError`."""
    from ..datafile import read_data_file
    from ..policy.config import from_settings
    from ..policy.rules import load_rules

    data = read_data_file(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{os.fspath(path)}: must be an object of PolicyConfig fields")
    data = dict(data)
    rules = data.pop(RULES_KEY, None)
    fields = [f.name for f in dataclasses.fields(PolicyConfig)]
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        raise ConfigError(f"{os.fspath(path)}: unknown policy setting{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown)} (known: {', '.join(sorted(fields))}, {RULES_KEY})")
    try:
        config = from_settings(data, base if base is not None else BACKTEST_POLICY)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{os.fspath(path)}: {e}") from None
    if rules is None:
        return config
    try:
        return load_rules(rules, config)
    except ConfigError as e:
        raise ConfigError(f"{os.fspath(path)}: {e}") from None


RULES_KEY = "rules"  # a policy file's list of policy rules
