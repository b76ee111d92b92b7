"""One session, one moment: the policy's decision and the session's warnings after it.

`step` is the per-session loop the service's cycle, the backtest and the what-if all run:
decide (`decider.decide`), name the policy rule whose settings decided, apply an admin's
exemption, drop the warnings the decision cleared (a finished episode's) and add its own
warning when it warns. What is sent, recorded or closed is the caller's; this holds the
rule for it. Pure: no I/O, the clock an argument.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Callable

from ..timestamps import format_time
from . import decider
from .evidence import Exempt
from .observations import Decision, Exemption, SessionView, Warning
from .rules import AppliedPolicy

#: what decides one session (`decider.decide`, or a caller's wrapper of it)
Decide = Callable[..., Decision]


@dataclass(frozen=True)
class Step:
    """A session's decision and its warnings of the current episode after it (oldest first;
    the decision's own warning last when it warns)."""

    decision: Decision
    warnings: tuple[Warning, ...]


def step(view: SessionView, *, now: dt.datetime, pending_gpus: int, policy: AppliedPolicy,
         exemption: Exemption | None = None, decide: Decide | None = None) -> Step:
    """The decision for `view` at `now` under `policy` (by `decide`, default the policy's
    `decider.decide`), an admin's `exemption` applied, and the session's warnings after it."""
    d = (decide or decider.decide)(view, now=now, pending_gpus=pending_gpus, config=policy.config)
    if policy.under_rules:
        d = dataclasses.replace(d, policy_rule=policy.rule, under_rules=True)
    d = exempted(d, exemption)
    warnings = tuple(w for w in view.warnings if w not in d.cleared)
    if d.action == "warn":
        assert d.reclaim_at is not None  # a warning always says when
        warnings += (Warning(session=d.session, t=now, rule=d.rule, reclaim_at=d.reclaim_at),)
    return Step(d, warnings)


def exempted(d: Decision, exemption: Exemption | None) -> Decision:
    """An admin's exemption (the admin page) turns a warn or reclaim into a keep; the
    decision's episode, the warnings it cleared and its policy rule stay."""
    if exemption is None or d.action == "keep" and d.rule == "exempt":
        return d
    return dataclasses.replace(
        d, action="keep", rule="exempt", reclaim_at=None,
        reason=f"exempted by {exemption.by} until {format_time(exemption.until)}",
        exempt=Exempt("admin", by=exemption.by, until=exemption.until))
