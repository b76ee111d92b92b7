"""What users and admins declare: keep-alive intents (one row per session) and admins'
exemptions."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ..policy.observations import Exemption, Intent
from .engine import StoreBase, rowcount
from .schema import ExemptionRow, IntentRow, aware


class IntentStore(StoreBase):

    def set_intent(self, session: str, until: dt.datetime, set_at: dt.datetime, by: str = "") -> Intent:
        """Record "keep alive until ``until``", replacing the session's intent (its one row).
        Capping ``until`` at ``max_keepalive`` is the caller's job."""
        until, set_at = aware(until, "until"), aware(set_at, "set_at")
        values = {"until": until, "set_at": set_at, "by": by, "cleared_at": None}
        for attempt in (1, 2):
            try:
                with self._session.begin() as db:
                    row = db.scalar(sa.select(IntentRow).where(IntentRow.session == session))
                    if row is None:
                        db.add(IntentRow(session=session, **values))
                    else:
                        for key, value in values.items():
                            setattr(row, key, value)
                break
            except sa_exc.IntegrityError:  # another writer added the row first: replace it
                if attempt == 2:
                    raise
        return Intent(session=session, until=until, set_at=set_at)

    def clear_intent(self, session: str, t: dt.datetime) -> bool:
        """Clear the session's current intent at ``t``; False if it had none."""
        t = aware(t, "t")
        with self._session.begin() as db:
            result = db.execute(sa.update(IntentRow)
                                .where(IntentRow.session == session, IntentRow.cleared_at.is_(None))
                                .values(cleared_at=t))
            return rowcount(result) > 0

    def intents(self) -> dict[str, Intent]:
        """The current (not cleared) intent of each session, expired ones included: the
        policy applies ``until``."""
        with self._session() as db:
            rows = db.scalars(sa.select(IntentRow).where(IntentRow.cleared_at.is_(None))
                              .order_by(IntentRow.set_at, IntentRow.id))
            return {r.session: Intent(session=r.session, until=r.until, set_at=r.set_at) for r in rows}

    def intent_changed_at(self, session: str) -> dt.datetime | None:
        """When the session's intent was last set or cleared; None if it never had one (or
        the retention pruned it). A cleared intent is remembered: see ``service._intent_from_spawn``."""
        with self._session() as db:
            row = db.execute(sa.select(IntentRow.set_at, IntentRow.cleared_at)
                             .where(IntentRow.session == session)).first()
        return None if row is None else row.cleared_at or row.set_at

    def set_exemption(self, session: str, until: dt.datetime, set_at: dt.datetime, by: str = "") -> None:
        """Exempt ``session`` from reclaim until ``until`` (replacing its current exemption)."""
        until, set_at = aware(until, "until"), aware(set_at, "set_at")
        with self._session.begin() as db:
            db.execute(sa.update(ExemptionRow)
                       .where(ExemptionRow.session == session, ExemptionRow.cleared_at.is_(None))
                       .values(cleared_at=set_at))
            db.add(ExemptionRow(session=session, until=until, set_at=set_at, by=by))

    def exemptions(self, now: dt.datetime) -> dict[str, Exemption]:
        """The exemptions in force at ``now``, by session."""
        now = aware(now, "now")
        with self._session() as db:
            rows = db.scalars(sa.select(ExemptionRow).where(ExemptionRow.cleared_at.is_(None),
                                                            ExemptionRow.until > now)
                              .order_by(ExemptionRow.set_at, ExemptionRow.id))
            return {r.session: Exemption(r.session, r.until, r.set_at, r.by) for r in rows}
