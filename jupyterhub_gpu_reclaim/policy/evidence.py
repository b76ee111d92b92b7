"""A decision's facts, typed: what was measured (`Measured`), the timed rule's clock and its
thresholds (`Deadline`), and the exemption that kept it (`Exempt`). The notices, the pages
and `reasons.why` read these fields, never the evidence.

The evidence (`Decision.shown()`) is only their display: each part writes its keys here, in
one place (`shown()`; times as `evidence_time`, unmeasured facts left out), for the pages,
the API, the notices' JSON and the store. A stored reclaim's evidence is the one thing read
back, by `Recorded.read` beside the writer (the store keeps no other record of why): leniently,
a value that does not read is None, never an error. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..timestamps import evidence_time, format_time, parse_time_lenient

Times = tuple[dt.datetime, dt.datetime]


@dataclass(frozen=True, slots=True)
class Measured:
    """What was measured of a session when it was decided; None: not measured (a time: or
    never seen)."""

    gpus: int | None = None
    latest_sample: dt.datetime | None = None
    problem: str | None = None  # why its data is missing (a hold)
    gpu_problem: str | None = None  # why its GPU has no value (the exporter's self-check)
    pods_as_of: dt.datetime | None = None  # decided with the pod list of this time
    # a GPU session past the data checks
    samples_considered: int | None = None
    window: dt.timedelta | None = None  # the idle window the highest use is measured over
    window_max_util: tuple[float | None, ...] | None = None  # per GPU
    latest_util: tuple[float, ...] | None = None
    never_used: bool | None = None
    last_used: dt.datetime | None = None
    last_busy_kernel: dt.datetime | None = None
    last_gpu_data_missing: dt.datetime | None = None
    cpu_work_since: dt.datetime | None = None
    hub_last_activity: dt.datetime | None = None
    terminal_last_activity: dt.datetime | None = None
    gpu_shared: bool = False
    shared_gpu_util: tuple[float | None, ...] | None = None  # the device's, never counted
    bridged_gap: Times | None = None
    intent_until: dt.datetime | None = None
    intent_end: dt.datetime | None = None  # capped by max_keepalive and max-age
    intent_capped: bool | None = None
    max_age_at: dt.datetime | None = None
    idle_gpus: tuple[int, ...] | None = None
    last_seen: dt.datetime | None = None  # the last sign of a person in the work's last sample
    # a server without GPUs (idle-culler's)
    inactive: dt.timedelta | None = None
    age: dt.timedelta | None = None
    admin: bool | None = None
    cull_arbiter: bool | None = None

    def shown(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _MEASURED_FIELDS:
            value = getattr(self, name)
            if value is None or (name == "gpu_shared" and not value):
                continue
            if name == "window":
                out["window_minutes"] = value.total_seconds() / 60
            elif name in ("inactive", "age"):
                out[f"{name}_s"] = value.total_seconds()
            elif name == "pods_as_of":
                out[name] = format_time(value)
            else:
                out[name] = _shown(value)
        return out


# read once, not at each of the 20,000 decisions a first cycle records (dataclasses.fields)
_MEASURED_FIELDS = tuple(f.name for f in dataclasses.fields(Measured))


@dataclass(frozen=True)
class Deadline:
    """A timed rule's clock: when its warning is due and its reclaim (`warn_at`, `reclaim_at`:
    its thresholds from the episode's start), the warning sent (`warned_at`) and the reclaim
    it leads to (`due`); `deferred` without pressure; `held_rule` the rule a hold stopped."""

    warn_at: dt.datetime
    reclaim_at: dt.datetime
    warned_at: dt.datetime | None = None
    due: dt.datetime | None = None
    deferred: bool = False
    held_rule: str | None = None

    def shown(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule_warn_at": evidence_time(self.warn_at),
                               "rule_reclaim_at": evidence_time(self.reclaim_at)}
        if self.warned_at is not None:
            out.update(warned_at=evidence_time(self.warned_at), reclaim_at=evidence_time(self.due))
        if self.deferred:
            out["reclaim_deferred"] = True
        if self.held_rule is not None:
            out["episode_rule"] = self.held_rule
        return out


@dataclass(frozen=True)
class Exempt:
    """Why a session is exempt: its "user", "group" (`groups`) or "profile", or an "admin"
    (`by`, `until`: the admin page's exemption)."""

    kind: str
    groups: tuple[str, ...] = ()
    by: str | None = None
    until: dt.datetime | None = None

    def shown(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exempt": self.kind}
        if self.groups:
            out["groups"] = list(self.groups)
        if self.by is not None:
            out["exempt_by"] = self.by
        if self.until is not None:
            out["exempt_until"] = format_time(self.until)
        return out


def _shown(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return evidence_time(value)
    if isinstance(value, tuple):
        return [_shown(v) for v in value]
    return value


@dataclass(frozen=True)
class Recorded:
    """A stored reclaim's evidence read back: the facts `reasons.why` says, and the admin who
    reclaimed it (`by`)."""

    measured: Measured
    idle_since: dt.datetime | None = None
    by: str | None = None

    def shown(self) -> dict[str, Any]:
        """As a reclaim's record keeps it (an admin's reclaim: `by`); `read` reads it back."""
        out = self.measured.shown()
        if self.idle_since is not None:
            out["idle_since"] = evidence_time(self.idle_since)
        if self.by is not None:
            out["by"] = self.by
        return out

    @classmethod
    def read(cls, stored: Any) -> Recorded:
        """Leniently: anything that does not read as its type is None."""
        ev: Mapping[str, Any] = stored if isinstance(stored, Mapping) else {}

        def time(key: str) -> dt.datetime | None:
            value = ev.get(key)
            return parse_time_lenient(value) if isinstance(value, str) else None

        def number(key: str) -> float | None:
            value = ev.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                return None
            return float(value) if 0 <= value < 1e9 else None

        def utils(key: str) -> tuple[float | None, ...] | None:
            value = ev.get(key)
            if not isinstance(value, list):
                return None
            return tuple(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                         for v in value)

        window, inactive = number("window_minutes"), number("inactive_s")
        by = ev.get("by")
        measured = Measured(
            window=dt.timedelta(minutes=window) if window else None, window_max_util=utils("window_max_util"),
            last_busy_kernel=time("last_busy_kernel"), cpu_work_since=time("cpu_work_since"),
            last_seen=time("last_seen"), intent_end=time("intent_end"), max_age_at=time("max_age_at"),
            hub_last_activity=time("hub_last_activity"),
            inactive=dt.timedelta(seconds=inactive) if inactive is not None else None)
        return cls(measured, time("idle_since"), by if isinstance(by, str) and by else None)
