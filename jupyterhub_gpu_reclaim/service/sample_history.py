"""Each session's recent samples, the history the policy decides on (`SampleHistory`).

The samples are kept in memory, trimmed by `policy.retained_samples`, and reloaded from
the store's typed observations (`StoredObservations.timeline`) after a restart. A gap in
the observations longer than one cycle interval plus `stale_after` — the service was
down, or met the session late — is unknown time: a missing-data marker restarts the session's idle clock instead
of counting the gap as idle.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Sequence

from ..policy.observations import Sample, Session, SessionInstance, SessionSample
from ..policy.scan import retained_samples
from ..policy.config import PolicyConfig
from ..store import Store

log = logging.getLogger("jupyterhub_gpu_reclaim.service")  # the reclaimer's log: this is part of its cycle

EPSILON = dt.timedelta(microseconds=1)


class SampleHistory:
    def __init__(self, policy: PolicyConfig, cycle_interval: dt.timedelta,
                 rule_policies: Sequence[PolicyConfig] = ()) -> None:
        self.policy = policy  # a session's own (`add`) may be a policy rule's
        self.all_policies = (policy, *rule_policies)
        self.max_gap = cycle_interval + policy.stale_after
        self._samples: dict[str, tuple[dt.datetime, list[Sample]]] = {}  # sid → (its start, its samples)
        self.recorded: set[tuple[str, dt.datetime]] = set()  # sessions (sid, start) the store has a line of

    def restore(self, store: Store, now: dt.datetime) -> None:
        """Reload the samples the store recorded as far back as any rule of the policy looks,
        under the base settings or any policy rule's."""
        lookback = max(2 * max(p.idle_reclaim_after, p.never_used_reclaim_after, p.cpu_work_reclaim_after)
                                   + p.warning_lead
                                   + p.stale_after for p in self.all_policies)
        n = 0
        for event in store.observations_between(now - lookback, now, intents=False).timeline():
            if isinstance(event, SessionInstance):
                self._samples[event.session.id] = (event.session.started, [])
                self.recorded.add((event.session.id, event.session.started))
            elif isinstance(event, SessionSample) and event.session in self._samples:
                self._samples[event.session][1].append(event.sample)
                n += 1
        if n:
            log.info("restored %d samples of %d sessions from %s", n, len(self._samples), store.name)

    def add(self, session: Session, sample: Sample, now: dt.datetime,
            policy: PolicyConfig | None = None) -> tuple[Sample, ...]:
        """The session's retained history with `sample` appended (a marker first after a gap),
        trimmed by the session's `policy` (default: the base policy)."""
        if session.gpus <= 0:  # decided on its latest sample alone (retained_samples): none is kept
            self._samples.pop(session.id, None)
            return (sample,)
        started, kept = self._samples.get(session.id, (session.started, []))
        if started != session.started:
            kept = []  # a new instance under the same name
        last = kept[-1].t if kept else None
        if session.gpus and (last if last is not None else session.started) < now - self.max_gap:
            kept.append(Sample(t=now - EPSILON, gpu_util=None, kernels=None, terminals=None))
        kept.append(sample)
        kept = list(retained_samples(kept, now=now, config=policy or self.policy, gpus=session.gpus,
                                     shared=session.gpu_shared))
        self._samples[session.id] = (session.started, kept)
        return tuple(kept)

    def of(self, sid: str) -> list[Sample]:
        return self._samples.get(sid, (None, []))[1]

    def forget(self, sid: str) -> None:
        """A stopped or gone session's history goes (a restart under its name is a new session)."""
        self._samples.pop(sid, None)
