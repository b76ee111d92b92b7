"""What the reclaimer knows about GPU sessions: the data that flows from the signals
(or a trace file) to the policy. Plain frozen dataclasses, no I/O.

The fields follow the session-trace format (docs/trace-format.md), so the live
service and `backtest` feed the policy the same things.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["keep", "warn", "reclaim", "hold"]
#: how a stop through the hub ended (actions.HubStopper), as the store records it: "stuck"
#: is accepted but unfinished (retried), "failed" refused or unanswered
Outcome = Literal["stopped", "already-stopped", "stuck", "failed"]


@dataclass(frozen=True)
class Kernel:
    """A kernel as `/api/kernels` reports it, reduced to what the policy reads."""

    execution_state: str  # "busy", "idle", "starting", ...
    last_activity: dt.datetime | None = None


@dataclass(frozen=True)
class Sample:
    """One observation of one session at time `t`.

    `None` for a whole field means the source did not answer (exporter or Prometheus down,
    server not answering); `None` for one GPU in `gpu_util` means no data for that GPU."""

    t: dt.datetime
    gpu_util: tuple[float | None, ...] | None  # percent per GPU, DCGM_FI_DEV_GPU_UTIL semantics
    gpu_mem_used_mib: tuple[float | None, ...] | None = None
    kernels: tuple[Kernel, ...] | None = None
    terminals: tuple[dt.datetime | None, ...] | None = ()  # last_activity of each terminal
    hub_last_activity: dt.datetime | None = None


@dataclass(frozen=True)
class Session:
    """A running server that holds GPUs (`gpus` > 0) or not (culled like idle-culler)."""

    id: str  # "user/servername"; "alice/" is alice's default server
    user: str
    server: str
    gpus: int
    started: dt.datetime
    admin: bool = False
    profile: str = ""
    groups: frozenset[str] = frozenset()
    gpu_type: str = ""  # the GPU product the pod asked for (its nodeSelector), "" when unknown
    # time-sliced: the GPU's utilization is not this server's alone, so its kernels decide
    gpu_shared: bool = False


@dataclass(frozen=True)
class Intent:
    """"Keep alive until": the user declared the session must survive until `until`."""

    session: str
    until: dt.datetime
    set_at: dt.datetime


@dataclass(frozen=True)
class Warning:
    """A warning already sent for the current idle episode of a session."""

    session: str
    t: dt.datetime
    rule: str
    reclaim_at: dt.datetime


@dataclass(frozen=True)
class SessionView:
    """Everything the policy may read about one session at one moment."""

    session: Session
    samples: tuple[Sample, ...]  # oldest first, the retained window
    intent: Intent | None = None
    warnings: tuple[Warning, ...] = ()  # of the current episode, oldest first
    # a server without GPUs: what idle-culler 2.0's cull_arbiter_hook answered for it this
    # cycle (truthy: inactive enough to cull); None: no hook, the timeout rule decides
    cull_arbiter: bool | None = None


@dataclass(frozen=True)
class Decision:
    """What the policy decided for one session, and why."""

    session: str
    action: Action
    rule: str  # e.g. "gpu-never-used", "gpu-idle", "max-age", "intent", "kernel-busy"
    reason: str  # one sentence a user or admin can read
    reclaim_at: dt.datetime | None = None  # with "warn": when the reclaim would come
    evidence: dict[str, Any] = field(default_factory=dict)
