"""The policy's settings: `PolicyConfig`, every knob of `policy.decide` declared once (its
type and default; the service option that sets it, `option_of`), and `from_settings`, the
one converter from settings as written to a PolicyConfig.

The service's options (`settings.gpu_policy.GpuPolicyOptions`: their help, defaults from
here) make a PolicyConfig from their typed values in one hop; the backtest's policy files
(`backtest.load_policy_config`) and the policy rules are read through `from_settings`: a
duration is seconds or "30m"/"2h", a set a list of strings, and 0 turns an optional
duration off. Each field's type picks its converter; nothing is guessed from the value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..durations import parse_duration


@dataclass(frozen=True)
class PolicyConfig:
    """Every knob of the policy, declared once: its type and default. The service's options
    (`settings.gpu_policy.GpuPolicyOptions`, with the help of each) make one from their
    values; the backtest's policy files and the policy rules are read into one by
    `from_settings`."""

    gpu_idle_threshold: float = 1.0
    never_used_warn_after: dt.timedelta = dt.timedelta(minutes=60)
    never_used_reclaim_after: dt.timedelta = dt.timedelta(minutes=120)
    idle_warn_after: dt.timedelta = dt.timedelta(minutes=60)
    idle_reclaim_after: dt.timedelta = dt.timedelta(minutes=120)
    unattended_warn_after: dt.timedelta = dt.timedelta(minutes=60)
    unattended_reclaim_after: dt.timedelta = dt.timedelta(minutes=120)
    warning_lead: dt.timedelta = dt.timedelta(minutes=15)
    cpu_work_keeps_unused_gpu: bool = False
    cpu_work_warn_after: dt.timedelta = dt.timedelta(hours=2)
    cpu_work_reclaim_after: dt.timedelta = dt.timedelta(hours=3)
    intent_grace: dt.timedelta = dt.timedelta(minutes=15)
    bridge_gaps_up_to: dt.timedelta = dt.timedelta(hours=2)

    # an intent's "until" is capped, or reclaim is never guaranteed
    max_keepalive: dt.timedelta = dt.timedelta(hours=12)

    # dcgm-exporter collects every 30 s; the hub's activity interval is 300 s
    stale_after: dt.timedelta = dt.timedelta(minutes=5)
    max_age: dt.timedelta | None = None

    # `pending_gpus` > 0 in decide()
    pressure_only: bool = False
    exempt_users: frozenset[str] = frozenset()
    exempt_groups: frozenset[str] = frozenset()
    exempt_profiles: frozenset[str] = frozenset()

    # Servers without GPUs, with jupyterhub-idle-culler's options and defaults: --timeout
    # on the hub's last_activity (the session start if there is none; idle-culler 2.0's
    # 600 s: the z2jh chart passes 3600, which the backtest chooses where it makes its
    # policy, `replay.backtest.Z2JH_CULL_TIMEOUT`) and --max-age (None or 0: off).
    cpu_timeout: dt.timedelta = dt.timedelta(seconds=600)
    cpu_max_age: dt.timedelta | None = None

    # idle-culler 2.0's --cull-admin-users only applies to deleting *users* (--cull-users);
    # admins' *servers* are culled like anyone's. Same here: the policy does not read it,
    # the user-culling step (decide_user) does.
    cull_admin_users: bool = True

    # idle-culler's --cull-default-servers and --cull-named-servers: the timeout rule only
    # (max-age ignores them there too)
    cull_default_servers: bool = True
    cull_named_servers: bool = True

    def __post_init__(self) -> None:
        def positive(name: str, allow_zero: bool = True) -> None:
            value = getattr(self, name)
            if not isinstance(value, dt.timedelta):
                raise ValueError(f"{name} must be a timedelta, got {value!r}")
            if value < dt.timedelta(0) or (not allow_zero and value == dt.timedelta(0)):
                raise ValueError(f"{name} must be {'>=' if allow_zero else '>'} 0, got {value}")

        if not isinstance(self.gpu_idle_threshold, (int, float)) or not (
            0 < self.gpu_idle_threshold <= 100
        ):
            raise ValueError(
                f"gpu_idle_threshold must be a percent in (0, 100], got {self.gpu_idle_threshold!r}"
            )
        # every duration by its declared type (none listed again here); only stale_after must be > 0
        for name, kind in SETTING_TYPES.items():
            if kind == dt.timedelta or (kind == dt.timedelta | None and getattr(self, name) is not None):
                positive(name, allow_zero=name != "stale_after")
        if self.never_used_warn_after > self.never_used_reclaim_after:
            raise ValueError("never_used_warn_after must not exceed never_used_reclaim_after")
        if self.idle_warn_after > self.idle_reclaim_after:
            raise ValueError("idle_warn_after must not exceed idle_reclaim_after")
        if self.unattended_warn_after > self.unattended_reclaim_after:
            raise ValueError("unattended_warn_after must not exceed unattended_reclaim_after")
        if self.cpu_work_warn_after > self.cpu_work_reclaim_after:
            raise ValueError("cpu_work_warn_after must not exceed cpu_work_reclaim_after")
        for name in ("exempt_users", "exempt_groups", "exempt_profiles"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a set of strings, got {value!r}")
            object.__setattr__(self, name, frozenset(value))


# --------------------------------------------------------------------------- settings


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, not {value!r}")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _names(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be a list of strings, not {value!r}")
    return frozenset(value)


def _duration_or_off(value: Any) -> dt.timedelta | None:
    return parse_duration(value) or None  # 0: off


# the converter of each field type: a setting as written (a file's value, an option's) → the field's value
_CONVERTERS: dict[Any, Callable[[Any], Any]] = {
    float: _number,
    bool: _flag,
    frozenset[str]: _names,
    dt.timedelta: parse_duration,
    dt.timedelta | None: _duration_or_off,
}
SETTING_TYPES: dict[str, Any] = typing.get_type_hints(PolicyConfig)  # field → its type


def from_settings(values: Mapping[str, Any], base: PolicyConfig | None = None) -> PolicyConfig:
    """`base` (default: the defaults) with `values` (field name → a setting as written:
    durations as seconds or "30m"/"2h", sets as lists of strings, null where the field
    allows it) converted by each field's type. ValueError names the setting that is not
    understood, or says which check of PolicyConfig failed."""
    changes: dict[str, Any] = {}
    for name, value in values.items():
        kind = SETTING_TYPES.get(name)
        if kind is None:
            raise ValueError(f"unknown policy setting {name}")
        try:
            if value is None:
                if type(None) not in typing.get_args(kind):
                    raise ValueError("must not be null")
                changes[name] = None
            else:
                changes[name] = _CONVERTERS[kind](value)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return dataclasses.replace(base if base is not None else PolicyConfig(), **changes)


#: the fields the service's options of another name set (the others: the option of the field's name)
_OPTION_OF = {"max_age": "gpu_max_age", "cpu_timeout": "timeout", "cpu_max_age": "max_age"}


def option_of(name: str) -> str:
    """The service option that sets the PolicyConfig field `name`."""
    return _OPTION_OF.get(name, name)
