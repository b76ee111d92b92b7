"""What happened, for the admin pages and audits: the audit log of what users and admins
did, the history page (reclaims and audit records), the decisions log, and the pruning of
ended records."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from dataclasses import dataclass
from typing import Any, Iterable

import sqlalchemy as sa

from ..policy.observations import Decision
from ..timestamps import utcnow
from .engine import ROWS_AT_ONCE, RowsRefused, StoreBase, rowcount
from .reclaims import ReclaimRecord, reclaim_record
from .schema import AuditRow, DecisionRow, ExemptionRow, IntentRow, ReclaimRow, WarningRow, aware, dumps


@dataclass(frozen=True)
class RuleChange:
    """A recorded change of a session's decision to `rule` at `t`."""

    t: dt.datetime
    session: str
    rule: str


@dataclass(frozen=True)
class AuditRecord:
    """What `actor` (a user, an admin, service:NAME) did (`action`) to `session` at `t`."""

    t: dt.datetime
    actor: str
    action: str
    session: str
    detail: dict[str, Any]


def _audit(row: AuditRow) -> AuditRecord:
    return AuditRecord(t=row.t, actor=row.actor, action=row.action, session=row.session,
                       detail=json.loads(row.detail))



class HistoryStore(StoreBase):

    def audit(self, actor: str, action: str, session: str = "", t: dt.datetime | None = None,
              **detail: Any) -> None:
        """Record that ``actor`` did ``action`` (to ``session``)."""
        t = aware(t, "t") if t is not None else utcnow()
        with self._session.begin() as db:
            db.add(AuditRow(t=t, actor=actor, action=action, session=session, detail=dumps(detail)))

    def audit_log(self, since: dt.datetime | None = None, session: str | None = None, *,
                  limit: int | None = None) -> list[AuditRecord]:
        """The audit records, oldest first. With ``limit``: the newest ``limit`` records only, newest first."""
        newest_first = limit is not None
        order = (AuditRow.t.desc(), AuditRow.id.desc()) if newest_first else (AuditRow.t, AuditRow.id)
        query = sa.select(AuditRow).order_by(*order).limit(limit)
        if since is not None:
            query = query.where(AuditRow.t >= aware(since, "since"))
        if session is not None:
            query = query.where(AuditRow.session == session)
        with self._session() as db:
            return [_audit(r) for r in db.scalars(query)]

    def history(self, since: dt.datetime | None = None, *, offset: int = 0,
                limit: int = 50) -> tuple[int, list[ReclaimRecord | AuditRecord]]:
        """One page of the reclaims and audit records since ``since``, newest first, for the
        admin API: (how many there are in all, the page)."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        r_where = ReclaimRow.t >= aware(since, "since") if since is not None else sa.true()
        a_where = AuditRow.t >= aware(since, "since") if since is not None else sa.true()
        # a compound select ordered on its own columns: SQLite merges the two index scans on t
        # and stops after the page (a subquery around it would sort every row first)
        page_query: sa.CompoundSelect[str, int, dt.datetime] = sa.union_all(
            sa.select(sa.literal_column("'reclaim'").label("kind"), ReclaimRow.id, ReclaimRow.t).where(r_where),
            sa.select(sa.literal_column("'audit'").label("kind"), AuditRow.id, AuditRow.t).where(a_where),
        ).order_by(sa.column("t").desc(), sa.column("id").desc()).offset(offset).limit(limit)
        with self._session() as db:
            total = (db.scalar(sa.select(sa.func.count()).select_from(ReclaimRow).where(r_where)) or 0) + (
                db.scalar(sa.select(sa.func.count()).select_from(AuditRow).where(a_where)) or 0)
            page = [(kind, i) for kind, i, _t in db.execute(page_query)]
            ids = {kind: [i for k, i in page if k == kind] for kind in ("reclaim", "audit")}
            reclaims = {r.id: reclaim_record(r) for r in db.scalars(sa.select(ReclaimRow)
                                                               .where(ReclaimRow.id.in_(ids["reclaim"])))}
            audits = {r.id: _audit(r) for r in db.scalars(sa.select(AuditRow).where(AuditRow.id.in_(ids["audit"])))}
        return total, [reclaims[i] if kind == "reclaim" else audits[i] for kind, i in page]

    def prune_records(self, older_than: dt.datetime) -> dict[str, int]:
        """Delete what ended before ``older_than`` (the record retention): intents cleared or
        expired, warnings whose episode was closed, exemptions cleared or expired, and audit
        records. Open warnings, current intents and exemptions, and reclaims are kept.
        Returns the rows deleted per table."""
        cut = aware(older_than, "older_than")
        ended = {
            IntentRow: sa.or_(IntentRow.cleared_at < cut, IntentRow.until < cut),
            ExemptionRow: sa.or_(ExemptionRow.cleared_at < cut, ExemptionRow.until < cut),
            WarningRow: WarningRow.cleared_at < cut,
            AuditRow: AuditRow.t < cut,
        }
        with self._session.begin() as db:
            return {model.__tablename__: rowcount(db.execute(sa.delete(model).where(where)))
                    for model, where in ended.items()}

    def record_decisions(self, decisions: Iterable[Decision], t: dt.datetime) -> int:
        """Record the decisions of one cycle, ROWS_AT_ONCE in one transaction (unless a
        session's row fails: `_insert_by_session`); returns how many. The first cycle after a
        start records every server's: 20,000 rows made at once took 40 MiB."""
        t = aware(t, "t")
        n, refused = 0, {}
        each = iter(decisions)
        while chunk := list(itertools.islice(each, ROWS_AT_ONCE)):
            rows: dict[str | None, list] = {}
            for d in chunk:
                rows.setdefault(d.session, []).append((DecisionRow, {
                    "t": t, "session": d.session, "action": d.action, "rule": d.rule, "reason": d.reason,
                    "reclaim_at": aware(d.reclaim_at, "reclaim_at") if d.reclaim_at else None,
                    "evidence": dumps(d.shown())}))
            n += len(chunk)
            try:
                self._insert_by_session("decisions", rows)
            except RowsRefused as e:  # the other chunks go all the same
                refused.update(e.refused)
        if refused:
            raise RowsRefused("decisions", refused)
        return n

    def rules_between(self, since: dt.datetime, until: dt.datetime) -> list[RuleChange]:
        """Each recorded change of decision in [since, until], and for each session the last
        change before `since` (at `since`: its state then), by time."""
        since, until = aware(since, "since"), aware(until, "until")
        with self._session() as db:
            before = sa.select(sa.func.max(DecisionRow.id)).where(DecisionRow.t < since).group_by(DecisionRow.session)
            earlier = db.execute(sa.select(DecisionRow.session, DecisionRow.rule)
                                 .where(DecisionRow.id.in_(before.scalar_subquery()))).all()
            rows = db.execute(sa.select(DecisionRow.t, DecisionRow.session, DecisionRow.rule)
                              .where(DecisionRow.t >= since, DecisionRow.t <= until)
                              .order_by(DecisionRow.t, DecisionRow.id)).all()
        return [RuleChange(since, sid, rule) for sid, rule in earlier] + [RuleChange(t, sid, rule) for t, sid, rule in rows]
