"""The reclaim cycle's types: its report, and what each of its steps (observe →
decide → act, in `service.Reclaimer`) hands the next."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..policy.observations import Decision, Exemption, Intent, Sample, Session, SessionSample, WhatRan
from ..policy.config import PolicyConfig
from ..policy.rules import AppliedPolicy
from ..signals.hub import HubServer
from ..signals.pods import PodInfo, PodSnapshot

#: where one session's problem came from: its hub model or pod ("hub", "pods": data that
#: cannot be used), its GPU series ("gpu"), its kernels' probe ("kernels"), an unexpected
#: error observing or deciding it ("session"), its rows the store refused ("store")
ProblemSource = Literal["hub", "pods", "gpu", "kernels", "session", "store"]


@dataclass(frozen=True)
class Reclaim:
    """A reclaim to begin: the session, the policy's decision, and the idle episode it ends."""

    session: Session
    decision: Decision
    episode: str
    ran: WhatRan | None = None  # what ran in it (its kernels' probe this cycle), None: not known
    address: tuple[str, str | None] | None = None  # its url path on the hub, its own address (the pod's)


class PodSource(Protocol):
    async def start(self) -> None: ...

    def snapshot(self, max_age: float) -> PodSnapshot: ...


@dataclass
class CycleReport:
    """What one cycle saw and did (for logs, tests and the benchmark)."""

    t: dt.datetime
    skipped: str | None = None  # the signal whose failure skipped the cycle
    degraded: str | None = None  # the signal whose failure the cycle decided without ("pods")
    servers: int = 0
    gpu_sessions: int = 0
    probes: int = 0
    decisions: dict[str, Decision] = field(default_factory=dict)
    warned: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)  # stops begun (not in dry run)
    would_reclaim: list[str] = field(default_factory=list)  # dry run
    users_deleted: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # signal → why it failed this cycle
    problems: dict[str, dict[ProblemSource, str]] = field(default_factory=dict)  # session → source → why
    error: str | None = None  # why the cycle raised (cycles_total{result="error"})
    seconds: float = 0.0

    def problem(self, sid: str, source: ProblemSource, why: str) -> None:
        """A problem with one session's data or records (the session's own, not a signal's)."""
        self.problems.setdefault(sid, {})[source] = why


@dataclass
class Observed:
    """One ready server as the cycle observed it."""

    server: HubServer
    session: Session
    sample: Sample
    pod: PodInfo | None
    policy: AppliedPolicy  # the settings it is decided under: its policy rule's, else the base policy's
    cull_arbiter: bool | None = None  # a server without GPUs: what the cull_arbiter_hook answered
    ran: WhatRan | None = None  # what runs in it, from its kernels' probe this cycle (None: not probed)

    @property
    def config(self) -> PolicyConfig:
        return self.policy.config


@dataclass
class Observation:
    """The observe step's result: the ready servers and the pods (the last list read, while
    the pod list cannot be read), each server's session (those being stopped left out) and
    the sessions held without asking the policy (data that cannot be used, an unexpected
    error)."""

    servers: list[HubServer]
    pods: PodSnapshot
    sessions: dict[str, Observed]
    held: dict[str, Decision]
    pods_as_of: dt.datetime | None = None  # the pod list cannot be read: when `pods` was


@dataclass
class Decisions:
    """The decide step's result (the decisions themselves are in the report): what the act
    step records, warns and stops."""

    intents: dict[str, Intent]
    exemptions: dict[str, Exemption]
    changed: list[Decision] = field(default_factory=list)  # action or rule changed since the last cycle
    warns: list[tuple[Session, Decision]] = field(default_factory=list)
    reclaims: dict[str, list[Reclaim]] = field(default_factory=dict)  # by user
    samples: list[SessionSample] = field(default_factory=list)  # of GPU sessions, to record
    new_sessions: list[Session] = field(default_factory=list)  # GPU sessions not yet recorded
