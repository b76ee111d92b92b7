"""Warnings and reclaims: one warning per (session, rule, episode), one reclaim per
(session, episode) and none while another of the session is unfinished, and how each stop
ended."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, get_args

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ..policy.evidence import Recorded
from ..policy.observations import Outcome, Warning, WhatRan, WhatSaved
from ..timestamps import format_time, utcnow
from .engine import StoreBase, rowcount
from .schema import ReclaimRow, WarningRow, aware, dumps, stored, unstorable

OUTCOMES = get_args(Outcome)


@dataclass(frozen=True)
class ReclaimRecord:
    id: int
    session: str
    episode: str
    rule: str
    t: dt.datetime
    gpus: int
    evidence: dict[str, Any]
    finished_at: dt.datetime | None
    outcome: str | None  # None: begun, not finished (e.g. the service died mid-stop)
    detail: str
    seen_at: dt.datetime | None = None  # when its user saw the notice of it (the hub's home page)
    ran: WhatRan | None = None  # what ran in the server at the stop; None: not known
    saved: WhatSaved | None = None  # what its JupyterLab tabs saved before the stop; None: not known

    @property
    def recorded(self) -> Recorded:
        """Its evidence read back into the facts that say why (`Recorded.read`)."""
        return Recorded.read(self.evidence)


def reclaim_record(row: ReclaimRow) -> ReclaimRecord:
    return ReclaimRecord(id=row.id, session=row.session, episode=row.episode, rule=row.rule, t=row.t,
                         gpus=row.gpus, evidence=json.loads(row.evidence), finished_at=row.finished_at,
                         outcome=row.outcome, detail=row.detail, seen_at=row.seen_at,
                         ran=row.ran, saved=row.saved)



def _of_user(user: str) -> sa.ColumnElement[bool]:
    """The reclaims of `user`'s servers (sessions `user/…`), the name matched exactly: a LIKE
    (startswith) ignores case on SQLite, and "Ann" read ann's reclaims."""
    prefix = stored(user + "/")  # compared as stored: the function's bind is plain text
    return sa.func.substr(ReclaimRow.session, 1, len(prefix)) == prefix


class ReclaimStore(StoreBase):

    def record_warning(self, warning: Warning, episode: str, channels: Sequence[str] = ()) -> bool:
        """Record a warning before sending it. False (and nothing written) when this
        (session, rule, episode) was already warned: do not send it again."""
        t, reclaim_at = aware(warning.t, "t"), aware(warning.reclaim_at, "reclaim_at")
        try:
            with self._session.begin() as db:
                exists = db.scalar(sa.select(WarningRow.id).where(
                    WarningRow.session == warning.session, WarningRow.rule == warning.rule,
                    WarningRow.episode == episode))
                if exists is not None:
                    return False
                db.add(WarningRow(session=warning.session, rule=warning.rule, episode=episode, t=t,
                                  reclaim_at=reclaim_at, channels=dumps(list(channels))))
        except sa_exc.IntegrityError:  # a concurrent writer got there first
            return False
        return True

    def open_warnings(self) -> dict[str, tuple[Warning, ...]]:
        """The open warnings (those of each session's open episode), oldest first, of every
        session that has any: one query, for a cycle."""
        out: dict[str, list[Warning]] = {}
        with self._session() as db:
            rows = db.scalars(sa.select(WarningRow).where(WarningRow.cleared_at.is_(None))
                              .order_by(WarningRow.t, WarningRow.id))
            for r in rows:
                out.setdefault(r.session, []).append(
                    Warning(session=r.session, t=r.t, rule=r.rule, reclaim_at=r.reclaim_at))
        return {k: tuple(v) for k, v in out.items()}

    def close_episode(self, session: str, warned_ats: Iterable[dt.datetime] | None = None,
                      *, t: dt.datetime | None = None) -> int:
        """Mark the session's open warnings sent at ``warned_ats`` (all open ones when None)
        cleared at ``t`` (default now). Returns how many were cleared. A cleared episode
        stays recorded: the same (session, rule, episode) is still never warned again."""
        t = aware(t, "t") if t is not None else utcnow()
        if unstorable(session) is not None:
            return 0  # never warned: its warning could not be recorded
        query = sa.update(WarningRow).where(WarningRow.session == session, WarningRow.cleared_at.is_(None))
        if warned_ats is not None:
            ats = [aware(a, "warned_ats") for a in warned_ats]
            if not ats:
                return 0
            query = query.where(WarningRow.t.in_(ats))
        with self._session.begin() as db:
            return rowcount(db.execute(query.values(cleared_at=t)))

    def begin_reclaim(self, session: str, rule: str, t: dt.datetime, evidence: dict[str, Any],
                      gpus: int, *, episode: str | None = None, ran: WhatRan | None = None) -> int | None:
        """Record a reclaim before stopping the server; returns its id, or None when it must
        not be stopped: a reclaim of this (session, episode) is already recorded, or another
        reclaim of the session is unfinished (begun or stuck). ``episode`` defaults to the
        episode of the session's latest open warning, else to ``rule@t`` (which guards only
        against concurrent stops). ``ran``: what ran in the server (its kernels' probe),
        kept with the reclaim for the way back."""
        t = aware(t, "t")
        try:
            with self._session.begin() as db:
                if episode is None:
                    episode = db.scalar(sa.select(WarningRow.episode)
                                        .where(WarningRow.session == session, WarningRow.cleared_at.is_(None))
                                        .order_by(WarningRow.t.desc(), WarningRow.id.desc()).limit(1))
                    if episode is None:
                        episode = f"{rule}@{format_time(t)}"
                blocked = db.scalar(sa.select(ReclaimRow.id).where(
                    ReclaimRow.session == session,
                    sa.or_(ReclaimRow.episode == episode, ReclaimRow.outcome.is_(None),
                           ReclaimRow.outcome == "stuck")).limit(1))
                if blocked is not None:
                    return None
                row = ReclaimRow(session=session, episode=episode, rule=rule, t=t, gpus=gpus,
                                 evidence=dumps(dict(evidence)), ran=ran)
                db.add(row)
                db.flush()
                return row.id
        except sa_exc.IntegrityError:
            return None

    def record_saved(self, reclaim_id: int, saved: WhatSaved) -> None:
        """What the server's tabs saved before this reclaim's stop (asked as it began)."""
        with self._session.begin() as db:
            db.execute(sa.update(ReclaimRow).where(ReclaimRow.id == reclaim_id).values(saved=saved))

    def finish_reclaim(self, reclaim_id: int, t: dt.datetime, outcome: Outcome, detail: str = "") -> None:
        """Record how the stop ended: "stopped" (also for a server found "already-stopped":
        it is down either way), "stuck" or "failed". A "stuck" reclaim may be finished again
        later (the retry stopped it: "stopped")."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        t = aware(t, "t")
        with self._session.begin() as db:
            row = db.get(ReclaimRow, reclaim_id)
            if row is None:
                raise KeyError(f"no reclaim with id {reclaim_id}")
            row.finished_at, row.detail = t, detail
            row.outcome = "stopped" if outcome == "already-stopped" else outcome

    def stuck_reclaims(self) -> list[ReclaimRecord]:
        return self._reclaims(ReclaimRow.outcome == "stuck")

    def unfinished_reclaims(self) -> list[ReclaimRecord]:
        """Begun and never finished: after a restart, check these servers again."""
        return self._reclaims(ReclaimRow.outcome.is_(None))

    def reclaims(self, since: dt.datetime | None = None, user: str | None = None) -> list[ReclaimRecord]:
        """The reclaims begun since ``since`` (of ``user``'s servers only, if given), oldest first."""
        where = [ReclaimRow.t >= aware(since, "since")] if since is not None else []
        if user is not None:
            where.append(_of_user(user))
        return self._reclaims(sa.and_(sa.true(), *where))

    def unseen_reclaims(self, user: str, since: dt.datetime) -> list[ReclaimRecord]:
        """`user`'s GPU servers stopped by a reclaim since `since` whose notice the user has
        not seen (`mark_seen`), oldest first."""
        return self._reclaims(sa.and_(ReclaimRow.t >= aware(since, "since"), ReclaimRow.outcome == "stopped",
                                      ReclaimRow.gpus > 0, ReclaimRow.seen_at.is_(None),
                                      _of_user(user)))

    def mark_seen(self, user: str, reclaim_id: int, t: dt.datetime) -> str | None:
        """`user` saw the notice of their reclaim `reclaim_id`: its session; None when it is
        not theirs, not there or seen before, and nothing changes."""
        with self._session.begin() as db:
            return db.scalar(sa.update(ReclaimRow).where(
                ReclaimRow.id == reclaim_id, _of_user(user),
                ReclaimRow.seen_at.is_(None)).values(seen_at=aware(t, "t")).returning(ReclaimRow.session))

    def _reclaims(self, where: Any) -> list[ReclaimRecord]:
        with self._session() as db:
            rows = db.scalars(sa.select(ReclaimRow).where(where).order_by(ReclaimRow.t, ReclaimRow.id))
            return [reclaim_record(r) for r in rows]
