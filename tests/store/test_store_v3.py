"""Schema v3 of the store and what bounds the rows users' writes make: one intent row per
session (a v2 store's history of intents is folded into it on upgrade), the retention that
prunes ended intents, warnings, exemptions and the audit log, and the admin history read a
page at a time."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.store import schema as store_mod
from jupyterhub_gpu_reclaim.policy.observations import Warning
from jupyterhub_gpu_reclaim.store import Store

from ..support.clock import START, at
from ..support.store_reads import schema_version


@pytest.fixture
def path(tmp_path):
    return tmp_path / "store.sqlite"


def make_v2(path):
    """A store as release 2 wrote it: its intents table (a row per set, the session indexed
    but not unique) holding alice's set, clear, set, set and bob's set then clear."""
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        store_mod.Base.metadata.create_all(
            conn, tables=[t for n, t in store_mod.Base.metadata.tables.items() if n != "intents"])
        conn.execute(sa.text(
            "CREATE TABLE intents (id INTEGER NOT NULL PRIMARY KEY, session VARCHAR(255) NOT NULL, "
            "until DATETIME NOT NULL, set_at DATETIME NOT NULL, by VARCHAR(255) NOT NULL, cleared_at DATETIME)"))
        conn.execute(sa.text("CREATE INDEX ix_intents_session ON intents (session)"))
        conn.execute(sa.text("CREATE INDEX ix_intents_cleared_at ON intents (cleared_at)"))
        conn.execute(sa.insert(store_mod.SchemaVersion).values(id=1, version=2))
        rows = [("alice/", 60, 0, 1), ("alice/", 90, 2, 3), ("alice/", 120, 3, 4), ("alice/", 240, 4, None),
                ("bob/x", 60, 0, 5)]
        for session, until, set_at, cleared in rows:
            conn.execute(sa.text("INSERT INTO intents (session, until, set_at, by, cleared_at) "
                                 "VALUES (:s, :u, :a, 'user', :c)"),
                         {"s": session, "u": at(until).replace(tzinfo=None), "a": at(set_at).replace(tzinfo=None),
                          "c": at(cleared).replace(tzinfo=None) if cleared is not None else None})
    engine.dispose()


def test_v2_store_is_upgraded_to_one_intent_row_per_session(path):
    make_v2(path)
    with Store.open(path) as s:
        assert schema_version(s) == store_mod.current_version()
        assert {sid: i.until for sid, i in s.intents().items()} == {"alice/": at(240)}  # the current one
        assert s.intent_changed_at("bob/x") == at(5)  # bob's clear is remembered
    with sqlite3.connect(path) as conn:
        assert conn.execute("select session, count(*) from intents group by session order by 1").fetchall() == [
            ("alice/", 1), ("bob/x", 1)]
        indexes = {r[1]: r[2] for r in conn.execute("pragma index_list(intents)")}
        assert indexes.get("uq_intents_session") == 1 and "ix_intents_session" not in indexes
        with pytest.raises(sqlite3.IntegrityError):  # the database itself refuses a second row
            conn.execute("insert into intents (session, until, set_at, by) values ('alice/', 0, 0, '')")


def test_a_new_intent_replaces_the_row_and_a_clear_marks_it(path):
    with Store.open(path) as s:
        for i in range(50):  # a user looping keep-alive and clear
            s.set_intent("alice/", at(60 + i), at(i), by="alice")
            assert s.clear_intent("alice/", at(i + 0.5))
        assert s.intents() == {} and s.intent_changed_at("alice/") == at(49.5)
        s.set_intent("alice/", at(200), at(100), by="alice")
        assert s.intents()["alice/"].until == at(200) and s.intent_changed_at("alice/") == at(100)
        assert s.intent_changed_at("nobody/") is None
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*) from intents").fetchone() == (1,)


def test_retention_prunes_what_ended_and_keeps_what_is_current(path):
    with Store.open(path) as s:
        s.set_intent("old/", at(days=-30), at(days=-31))  # expired a month ago
        s.set_intent("gone/", at(days=1), at(days=-40))
        s.clear_intent("gone/", at(days=-35))  # cleared a month ago
        s.set_intent("kept/", at(days=1), at(days=-40))  # current
        s.set_exemption("old/", at(days=-30), at(days=-31), by="admin")
        s.set_exemption("kept/", at(days=1), at(days=-40), by="admin")
        s.record_warning(Warning("old/", at(days=-40), "gpu-idle", at(days=-40)), "ep-old")
        s.close_episode("old/", t=at(days=-39))
        s.record_warning(Warning("open/", at(days=-40), "gpu-idle", at(days=-40)), "ep-open")  # still open
        for i in range(5):
            s.audit("alice", "keepalive", "alice/", t=at(days=-(40 - i)))
        s.audit("alice", "keepalive", "alice/", t=START)
        rid = s.begin_reclaim("old/", "gpu-idle", at(days=-40), {}, 1, episode="e")
        s.finish_reclaim(rid, at(days=-40), "stopped")

        deleted = s.prune_records(at(days=-7))
        assert deleted == {"intents": 2, "exemptions": 1, "warnings": 1, "audit": 5}
        assert set(s.intents()) == {"kept/"} and s.intent_changed_at("gone/") is None
        assert set(s.exemptions(START)) == {"kept/"}
        assert set(s.open_warnings()) == {"open/"}
        assert [a.t for a in s.audit_log()] == [START]
        assert len(s.reclaims()) == 1  # reclaims are history: kept
        assert s.prune_records(at(days=-7)) == {"intents": 0, "exemptions": 0, "warnings": 0, "audit": 0}


def test_history_is_read_a_page_at_a_time_newest_first(path):
    with Store.open(path) as s:
        for i in range(7):
            s.audit("alice", "keepalive", "alice/", t=at(i), n=i)
        for i in (2.5, 5.5):
            rid = s.begin_reclaim(f"u{i}/", "gpu-idle", at(i), {}, 1, episode=str(i))
            s.finish_reclaim(rid, at(i + 1), "stopped")
        total, page = s.history(at(1), offset=0, limit=4)
        assert total == 8  # 6 audit records and 2 reclaims since at(1)
        assert [(type(r).__name__, r.t) for r in page] == [
            ("AuditRecord", at(6)), ("ReclaimRecord", at(5.5)), ("AuditRecord", at(5)), ("AuditRecord", at(4))]
        _, rest = s.history(at(1), offset=4, limit=4)
        assert [(type(r).__name__, r.t) for r in rest] == [
            ("AuditRecord", at(3)), ("ReclaimRecord", at(2.5)), ("AuditRecord", at(2)), ("AuditRecord", at(1))]
        assert s.history(at(1), offset=8, limit=4) == (8, [])
        assert [a.detail["n"] for a in s.audit_log(limit=2)] == [6, 5]
        with pytest.raises(ValueError):
            s.history(offset=-1)


def test_reclaims_of_one_user_take_names_literally(path):
    with Store.open(path) as s:
        for sid in ("a%b/", "axb/", "a_b/x", "a%b/named"):
            s.begin_reclaim(sid, "gpu-idle", START, {}, 1, episode=sid)
        assert sorted(r.session for r in s.reclaims(user="a%b")) == ["a%b/", "a%b/named"]
        assert [r.session for r in s.reclaims(user="a_b")] == ["a_b/x"]


def make_v3(path):
    """A store as release 3 wrote it: its reclaims table without `seen_at`, holding a reclaim."""
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        store_mod.Base.metadata.create_all(
            conn, tables=[t for n, t in store_mod.Base.metadata.tables.items() if n != "reclaims"])
        conn.execute(sa.text(
            "CREATE TABLE reclaims (id INTEGER NOT NULL PRIMARY KEY, session VARCHAR(255) NOT NULL, "
            "episode VARCHAR(255) NOT NULL, rule VARCHAR(64) NOT NULL, t DATETIME NOT NULL, gpus INTEGER NOT NULL, "
            "evidence TEXT NOT NULL, finished_at DATETIME, outcome VARCHAR(16), detail TEXT NOT NULL, "
            "CONSTRAINT uq_reclaim_episode UNIQUE (session, episode))"))
        conn.execute(sa.text("INSERT INTO reclaims (session, episode, rule, t, gpus, evidence, finished_at, outcome, "
                             "detail) VALUES ('alice/', 'e1', 'gpu-idle', :t, 1, '{}', :t, 'stopped', '')"),
                     {"t": at(60).replace(tzinfo=None)})
        conn.execute(sa.insert(store_mod.SchemaVersion).values(id=1, version=3))
    engine.dispose()


def test_v3_store_is_upgraded_to_note_when_a_reclaim_was_seen(path):
    make_v3(path)
    with Store.open(path) as s:
        assert schema_version(s) == store_mod.current_version() == 8
        [r] = s.unseen_reclaims("alice", since=START)
        assert r.seen_at is None and s.unseen_reclaims("bob", since=START) == []
        assert s.mark_seen("bob", r.id, at(70)) is None  # not bob's: nothing changes
        assert s.mark_seen("alice", r.id, at(70)) == "alice/"
        assert s.unseen_reclaims("alice", since=START) == [] and s.reclaims()[0].seen_at == at(70)
        assert s.mark_seen("alice", r.id, at(80)) is None  # seen once: the first time stays
        assert s.reclaims()[0].seen_at == at(70)


def test_only_a_users_own_finished_gpu_reclaims_are_unseen(path):
    with Store.open(path) as s:
        for sid, gpus, outcome in (("al/", 1, "stopped"), ("al/x", 0, "stopped"), ("al/y", 1, "stuck"),
                                   ("al_/", 1, "stopped"), ("al/z", 1, None)):
            rid = s.begin_reclaim(sid, "gpu-idle", at(10), {}, gpus, episode="e")
            if outcome:
                s.finish_reclaim(rid, at(11), outcome)
        # not a CPU server, a stuck or unfinished stop, or another user whose name shares a prefix
        assert [r.session for r in s.unseen_reclaims("al", since=START)] == ["al/"]
        assert s.unseen_reclaims("al", since=at(20)) == []
