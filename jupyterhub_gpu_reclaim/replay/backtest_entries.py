"""The backtest report's entries as typed records: the policy's warnings, its reclaims, its
runs of holds and the reclaims scored false, made into the report's JSON objects (`to_dict`,
docs/trace-format.md) only where `backtest.replay` writes the report."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from . import interruptions
from ..timestamps import format_time


def named_rule(policy_rule: str | None, under_rules: bool) -> dict[str, Any]:
    """The ``policy_rule`` key of a warning or reclaim: only where policy rules are in force."""
    return {"policy_rule": policy_rule} if under_rules else {}


@dataclass(frozen=True)
class WarningEntry:
    """A warning of the policy's, as the report lists it: sent at `t`, the reclaim due at
    `reclaim_at`."""

    session: str
    t: dt.datetime
    rule: str
    reclaim_at: dt.datetime
    policy_rule: str | None = None  # as in `ReclaimEntry`
    under_rules: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "t": format_time(self.t), "rule": self.rule,
                "reclaim_at": format_time(self.reclaim_at), **named_rule(self.policy_rule, self.under_rules)}


@dataclass(frozen=True)
class ReclaimEntry:
    """A reclaim of the policy's, as the report lists it."""

    session: str
    t: dt.datetime
    rule: str
    gpus: int
    gpu_hours_freed: float  # rounded as the report gives it: the totals add these
    # the policy rule whose settings decided (None: the base policy), named only where policy
    # rules are in force (`under_rules`), as in `Decision`
    policy_rule: str | None = None
    under_rules: bool = False
    user_returned: dt.datetime | None = None  # the user's first busy kernel after it, once the replay ended

    @property
    def returned(self) -> str:
        """How soon the user came back (`interruptions.bucket`)."""
        return interruptions.bucket(self.t, self.user_returned)

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "t": format_time(self.t), "rule": self.rule, "gpus": self.gpus,
                "gpu_hours_freed": self.gpu_hours_freed, **named_rule(self.policy_rule, self.under_rules),
                "user_returned": format_time(self.user_returned) if self.user_returned else None,
                "returned": self.returned}


@dataclass(frozen=True)
class HoldRun:
    """Consecutive holds of one session for one reason (the decisions' rule): from the first
    held instant `t` to the last, `last`, over `samples` decisions."""

    session: str
    t: dt.datetime
    reason: str
    last: dt.datetime
    samples: int = 1

    def extended(self, now: dt.datetime) -> HoldRun:
        """The run with one more hold, at `now`."""
        return replace(self, last=now, samples=self.samples + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "t": format_time(self.t), "reason": self.reason,
                "last": format_time(self.last), "samples": self.samples}


@dataclass(frozen=True)
class FalseReclaim:
    """A reclaim at `t` inside a ``must_keep`` label of its session, ``[label_from, label_to)``."""

    session: str
    t: dt.datetime
    label_from: dt.datetime
    label_to: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "t": format_time(self.t),
                "label_from": format_time(self.label_from), "label_to": format_time(self.label_to)}
