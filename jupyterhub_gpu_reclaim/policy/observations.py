"""What the reclaimer knows about GPU sessions: the data that flows from the signals
(or a trace file) to the policy. Plain frozen dataclasses, no I/O.

The fields follow the session-trace format (docs/trace-format.md), so the live
service and `backtest` feed the policy the same things.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from ..timestamps import evidence_time
from .evidence import Deadline, Exempt, Measured

Action = Literal["keep", "warn", "reclaim", "hold"]
#: how a stop through the hub ended (actions.HubStopper), as the store records it: "stuck"
#: is accepted but unfinished (retried), "failed" refused or unanswered
Outcome = Literal["stopped", "already-stopped", "stuck", "failed"]


@dataclass(frozen=True)
class Kernel:
    """A kernel as `/api/kernels` reports it, reduced to what the policy reads."""

    execution_state: str  # "busy", "idle", "starting", ...
    last_activity: dt.datetime | None = None


#: the most entries a record of what ran keeps (`WhatRan`), and the longest path: a user
#: controls how many kernels and terminals their server reports, and their names
MAX_RAN = 50
MAX_PATH = 1024


@dataclass(frozen=True)
class Ran:
    """One thing that ran in a server: a document with a kernel as `/api/sessions` reports
    it (`kind` "notebook", "console", "file": the session's type) or a terminal (`kind`
    "terminal", `path` its name), and its last activity."""

    kind: str
    path: str
    last_activity: dt.datetime | None = None


@dataclass(frozen=True)
class WhatRan:
    """What ran in a server when it was reclaimed (or would have been, in dry run): at most
    MAX_RAN entries, the latest active first, and how many more there were (or could not be
    kept: a path too long or not valid Unicode). Untrusted text: escape it on display."""

    ran: tuple[Ran, ...] = ()
    more: int = 0

    @classmethod
    def of(cls, entries: list[Ran] | tuple[Ran, ...], unreadable: int = 0) -> WhatRan:
        """The record of `entries` (and of `unreadable` more that could not be read)."""
        def keepable(r: Ran) -> bool:
            try:
                r.path.encode("utf-8")
                r.kind.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no database or page can hold it
                return False
            return 0 < len(r.path) <= MAX_PATH and 0 < len(r.kind) <= 32

        kept = sorted((r for r in entries if keepable(r)), key=_latest_first)
        return cls(tuple(kept[:MAX_RAN]), unreadable + len(entries) - min(len(kept), MAX_RAN))

    def shown(self) -> dict[str, Any]:
        """As the API, the pages' data and a dry run's evidence write it."""
        return {"ran": [{"kind": r.kind, "path": r.path, "last_activity": evidence_time(r.last_activity)}
                        for r in self.ran], "more": self.more}


#: what a tab did with a document it was asked to save before the stop (the lab package's
#: saving.py): "saving" is a save the stop cut short
SAVE_OUTCOMES = ("saved", "would-save", "saving", "read-only", "conflict", "failed")
#: when: `save_lead` before the reclaim time, or as the stop began
SAVE_REASONS = ("lead", "stop")


@dataclass(frozen=True)
class SavedDoc:
    """One document with unsaved changes that a JupyterLab tab of the server saved before the
    stop (or could not: `outcome`; or would have, in dry run), when (the server's clock) and
    whether at the lead before the reclaim or as the stop started (`reason`)."""

    path: str
    outcome: str
    at: dt.datetime | None = None
    reason: str = "stop"


@dataclass(frozen=True)
class WhatSaved:
    """What the server's open tabs saved before a reclaim: how many tabs were open (0: none,
    so nothing could be saved) and each document, at most MAX_RAN, with how many more
    there were. Untrusted text (the user's server says it): escape it on display."""

    tabs: int = 0
    documents: tuple[SavedDoc, ...] = ()
    more: int = 0

    def shown(self) -> dict[str, Any]:
        """As the API, the pages' data and a dry run's evidence write it."""
        return {"tabs": self.tabs, "more": self.more,
                "documents": [{"path": d.path, "outcome": d.outcome, "at": evidence_time(d.at), "reason": d.reason}
                              for d in self.documents]}


def _latest_first(r: Ran) -> tuple[bool, float, str, str]:
    return (r.last_activity is None, -r.last_activity.timestamp() if r.last_activity else 0.0, r.kind, r.path)


@dataclass(frozen=True, slots=True)
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
class SessionSample:
    """A sample of the session with id `session` (a trace's ``sample`` line, a stored sample)."""

    session: str
    sample: Sample

    @property
    def t(self) -> dt.datetime:
        return self.sample.t


@dataclass(frozen=True)
class Pressure:
    """The GPUs requested by pods waiting for one, at `t`."""

    t: dt.datetime
    pending_gpus: int


@dataclass(frozen=True, slots=True)
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
class SessionInstance:
    """One run of a server, from its start: its Session and when it stopped (None: it runs,
    or no one heard). A trace's ``session`` line is one (`replay.trace.TraceSession`), and so
    is an instance the store recorded."""

    session: Session
    stopped: dt.datetime | None = None

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def t(self) -> dt.datetime:
        return self.session.started


@dataclass(frozen=True)
class Intent:
    """"Keep alive until": the user declared the session must survive until `until`."""

    session: str
    until: dt.datetime
    set_at: dt.datetime


@dataclass(frozen=True)
class IntentChange:
    """"Keep alive until" set (`until`) or cleared (None) at `t`."""

    t: dt.datetime
    session: str
    until: dt.datetime | None


@dataclass(frozen=True)
class Exemption:
    """An admin's exemption (the admin page): the session is kept until `until`."""

    session: str
    until: dt.datetime
    set_at: dt.datetime
    by: str = ""


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


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided for one session, and why.

    The facts its callers read are typed fields (`measured`, `deadline`, `exempt`,
    `idle_since`, ...: policy/evidence.py); `shown()` is their display, the evidence the
    pages, the API, the notices and the store write (built here and nowhere else)."""

    session: str
    action: Action
    rule: str  # e.g. "gpu-never-used", "gpu-idle", "max-age", "intent", "kernel-busy"
    reason: str  # one sentence a user or admin can read
    reclaim_at: dt.datetime | None = None  # with "warn": when the reclaim would come
    measured: Measured = Measured()
    deadline: Deadline | None = None  # a timed rule's clock and thresholds
    exempt: Exempt | None = None
    ran: WhatRan | None = None  # a dry run's reclaim: what would have been recorded as running
    would_save: WhatSaved | None = None  # a dry run's reclaim: what its tabs would have saved
    # when the session's idle episode began (a GPU session past the data checks), else None
    idle_since: dt.datetime | None = None
    # warnings of a finished episode (the session's, passed in its view): no longer its own
    cleared: tuple[Warning, ...] = ()
    # the policy rule whose settings decided (None: the base policy), named only where
    # policy rules are in force (`under_rules`)
    policy_rule: str | None = None
    under_rules: bool = False

    def shown(self) -> dict[str, Any]:
        """The evidence: the typed facts as people read them (times as `evidence_time`)."""
        out = self.measured.shown()
        for part in (self.deadline, self.exempt):
            if part is not None:
                out.update(part.shown())
        if self.ran is not None:
            out["ran"] = self.ran.shown()
        if self.would_save is not None:
            out["would_save"] = self.would_save.shown()
        if self.idle_since is not None:
            out["idle_since"] = evidence_time(self.idle_since)
        if self.cleared:
            out["episode_cleared"] = True
            out["cleared_warnings"] = [evidence_time(w.t) for w in self.cleared]
        if self.under_rules:
            out["policy_rule"] = self.policy_rule
        return out
