"""The policy's settings: `PolicyConfig`, every knob of `policy.decide` declared once (its
type, default, help text, and the service option that sets it), and `from_settings`, the
one converter from settings as written to a PolicyConfig.

The service's options are made from these fields (`application.GpuReclaim`) and read through
`from_settings`, as are the backtest's policy files (`backtest.load_policy_config`): a
duration is seconds or "30m"/"2h" in both, a set a list of strings, and 0 turns an
optional duration off. Each field's type picks its converter; nothing is guessed from
the value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from dataclasses import dataclass, field
from textwrap import dedent
from typing import Any, Callable, Mapping

from ..durations import parse_duration


def _setting(default: Any, text: str = "", *, option: str | None = None) -> Any:
    """A PolicyConfig field with the help text of the service option that sets it and that
    option's name (default: the field's). application.GpuReclaim makes the options of the fields
    with help; the others are set by jupyterhub-idle-culler's options of those names."""
    return field(default=default, metadata={"help": dedent(text).strip(), "option": option})


@dataclass(frozen=True)
class PolicyConfig:
    """Every knob of the policy, declared once: its type, default and help. The service's
    options (application.GpuReclaim) and the backtest's policy files are made from these fields
    and read through the same converter, `from_settings`."""

    gpu_idle_threshold: float = _setting(1.0, """
        Percent GPU utilization (DCGM_FI_DEV_GPU_UTIL) below which a GPU counts as idle
        in a sample; in (0, 100].

        Near zero on purpose: a GPU at 3-8% is a slow data loader, not an idle GPU
        (Princeton raised its cut from 0% to 9% and withdrew it after a backlash).
        """)

    never_used_warn_after: dt.timedelta = _setting(dt.timedelta(minutes=60), """
        Warn a session whose GPU nothing ran on and whose kernels ran no cell this long
        after it started (seconds or "1h"). Default 1 h: the idle rule's warning point, an
        hour before the reclaim.
        """)

    never_used_reclaim_after: dt.timedelta = _setting(dt.timedelta(minutes=120), """
        Reclaim a session whose GPU nothing ran on and whose kernels ran no cell this long
        after it started (seconds or "2h"). Default 2 h: a server's start is its user's
        first action, given the idle rule's window as a cell is (Yale's 1 h is for batch
        jobs; real notebook users often run their first cell 1-2 h after the start).
        """)

    idle_warn_after: dt.timedelta = _setting(dt.timedelta(minutes=60), """
        Warn a session whose GPU was used, then idle this long (seconds or "1h").
        Princeton and Yale: 60 min.
        """)

    idle_reclaim_after: dt.timedelta = _setting(dt.timedelta(minutes=120), """
        Reclaim a session whose GPU was used, then idle this long (seconds or "2h").
        Princeton and Yale: 120 min.
        """)

    unattended_warn_after: dt.timedelta = _setting(dt.timedelta(minutes=60), """
        Warn a session this long after its GPU work (a cell, a job in a terminal) ended
        with nobody there (seconds or "1h"; rule "job-ended-unattended"): when the last
        sign of a person (the browser, a cell, a terminal, a keep-alive) came
        --idle-reclaim-after or more before the work ended, and none since. Default 1 h,
        as --idle-warn-after: the owner's absence during a job says nothing about when
        they come back after it (real users came back 139 and 149 min after day-long jobs).
        """)

    unattended_reclaim_after: dt.timedelta = _setting(dt.timedelta(minutes=120), """
        Reclaim a session this long after its GPU work ended with nobody there (seconds or
        "2h"; see --unattended-warn-after). Default 2 h, as --idle-reclaim-after; shorter
        suits a hub whose GPU work is batch jobs nobody comes back to.
        """)

    warning_lead: dt.timedelta = _setting(dt.timedelta(minutes=15), """
        Minimum time between the first warning of an idle episode and the reclaim, so
        the user can answer it (seconds or "15m"). Default 15 min.
        """)

    cpu_work_keeps_unused_gpu: bool = _setting(False, """
        Let CPU work keep a GPU session whose GPU nothing ran on for as long as it goes on
        (rule "cpu-work-on-gpu" off). Off by default: CPU cells that go on for
        --cpu-work-reclaim-after with the GPU untouched are a server on the wrong profile,
        warned --cpu-work-warn-after into the work (the warning says a CPU profile would do
        and offers the keep-alive). Either way a person who runs cells is present: the
        idle timings count from their last cell.
        """)

    cpu_work_warn_after: dt.timedelta = _setting(dt.timedelta(hours=2), """
        Warn a session whose kernels have run CPU cells, with no pause of --idle-warn-after,
        for this long while its GPU was never used since it started (seconds or "2h"; rule
        "cpu-work-on-gpu"). Default 2 h: Princeton's 2 h of a GPU at 0 %.
        """)

    cpu_work_reclaim_after: dt.timedelta = _setting(dt.timedelta(hours=3), """
        Reclaim a session whose kernels have run CPU cells this long with its GPU never used
        (seconds or "3h"; see --cpu-work-warn-after). Default 3 h: an hour after the warning,
        Yale's hour between the warning and the cancel of an idle GPU, for the user at work
        to answer it (keep alive, or start again on a CPU profile).
        """)

    intent_grace: dt.timedelta = _setting(dt.timedelta(minutes=15), """
        How long after a "keep alive until" ends an idle session is reclaimed (rule
        "intent-ended"; seconds or "15m"). Its warning comes --warning-lead before the
        end; using the GPU or a kernel from then on cancels it. Default 15 min: the user
        named the time, and the warning already gave them --warning-lead to extend it.
        """)

    bridge_gaps_up_to: dt.timedelta = _setting(dt.timedelta(hours=2), """
        Longest gap in the GPU data that the idle clock may run across (seconds or "2h";
        0: never). A gap is bridged only when the samples on both sides show every GPU
        idle and no busy kernel, and the kernels' and terminals' last activity did not
        move across it; otherwise the idle clock starts again after the gap. Missing
        data itself never leads to a reclaim. Default 2 h, the GPU-idle rule's window.
        """)

    # an intent's "until" is capped, or reclaim is never guaranteed
    max_keepalive: dt.timedelta = _setting(dt.timedelta(hours=12), """
        Longest "keep alive until" a user can declare, counted from when it is set
        (seconds or "12h"). Default 12 h (GitHub Codespaces' cap).
        """)

    # dcgm-exporter collects every 30 s; the hub's activity interval is 300 s
    stale_after: dt.timedelta = _setting(dt.timedelta(minutes=5), """
        GPU data older than this is missing, and a session with missing GPU data is held,
        never reclaimed (seconds or "5m"; > 0). Default 5 min.
        """)

    max_age: dt.timedelta | None = _setting(None, """
        Optional hard lifetime of GPU sessions from their start, warned --warning-lead
        before (seconds or "7d"). It also caps keep-alive intents. 0: off (default).
        """, option="gpu_max_age")

    # `pending_gpus` > 0 in decide()
    pressure_only: bool = _setting(False, """
        Reclaim GPU sessions only while GPU requests are pending (pods unschedulable
        for nvidia.com/gpu). Warnings still go out. Default off.
        """)

    exempt_users: frozenset[str] = _setting(frozenset(), """
        User names whose GPU sessions are never reclaimed.
        """)

    exempt_groups: frozenset[str] = _setting(frozenset(), """
        JupyterHub groups whose members' GPU sessions are never reclaimed.
        """)

    exempt_profiles: frozenset[str] = _setting(frozenset(), """
        KubeSpawner profile slugs whose sessions are never reclaimed: the profile the
        spawner applied (its pod's jupyterhub-gpu-reclaim/profile annotation), else the one
        the spawn named.
        """)

    # Servers without GPUs, with jupyterhub-idle-culler's options: --timeout on the hub's
    # last_activity (the session start if there is none; the z2jh chart's 3600 s here,
    # the option's own default is idle-culler's 600 s) and --max-age (None or 0: off).
    cpu_timeout: dt.timedelta = _setting(dt.timedelta(seconds=3600), option="timeout")
    cpu_max_age: dt.timedelta | None = _setting(None, option="max_age")

    # idle-culler 2.0's --cull-admin-users only applies to deleting *users* (--cull-users);
    # admins' *servers* are culled like anyone's. Same here: the policy does not read it,
    # the user-culling step (decide_user) does.
    cull_admin_users: bool = _setting(True)

    # idle-culler's --cull-default-servers and --cull-named-servers: the timeout rule only
    # (max-age ignores them there too)
    cull_default_servers: bool = _setting(True)
    cull_named_servers: bool = _setting(True)

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
        for name in (
            "never_used_warn_after", "never_used_reclaim_after", "idle_warn_after",
            "idle_reclaim_after", "warning_lead", "max_keepalive", "cpu_timeout",
            "intent_grace", "bridge_gaps_up_to", "unattended_warn_after", "unattended_reclaim_after",
            "cpu_work_warn_after", "cpu_work_reclaim_after",
        ):
            positive(name)
        positive("stale_after", allow_zero=False)
        for name in ("max_age", "cpu_max_age"):
            if getattr(self, name) is not None:
                positive(name)
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


def option_of(name: str) -> str:
    """The service option that sets the PolicyConfig field `name`."""
    return _FIELDS[name].metadata["option"] or name


_FIELDS = {f.name: f for f in dataclasses.fields(PolicyConfig)}
