"""The store (jupyterhub_gpu_reclaim.store) on real SQLite files."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import io
import sqlite3
import sys

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.policy.evidence import Measured
from jupyterhub_gpu_reclaim.policy.observations import (
    Decision, IntentChange, Kernel, Pressure, Sample, Session, SessionSample, Warning,
)
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store import schema as store_mod
from jupyterhub_gpu_reclaim.store.engine import StoreError, StoreVersionError
from jupyterhub_gpu_reclaim.store.audit import RuleChange
from jupyterhub_gpu_reclaim.replay.trace import TraceConfig, TraceSession, read_trace
from jupyterhub_gpu_reclaim.replay.trace_export import export_records, export_trace

from ..support.clock import at
from ..support.store_reads import decided_sessions, rows, schema_version

UTC = dt.timezone.utc


def loads_trace(text: str) -> list:
    return list(read_trace(io.StringIO(text)))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "reclaim.sqlite"


@pytest.fixture
def store(path):
    s = Store.open(f"sqlite:///{path}")
    yield s
    s.close()


ALICE = Session(id="alice/", user="alice", server="", gpus=1, started=at(0), profile="a100")
BOB = Session(id="bob/big", user="bob", server="big", gpus=2, started=at(5), groups=frozenset({"ml"}))


def warning(session="alice/", t=at(60), rule="gpu-idle"):  # noqa: B008 - a datetime, immutable
    return Warning(session=session, t=t, rule=rule, reclaim_at=t + dt.timedelta(minutes=60))


# --------------------------------------------------------------------------- opening, versions


def test_new_store_is_current_version_and_reopens(path):
    with Store.open(path) as s:  # a plain path means a SQLite file
        assert schema_version(s) == store_mod.current_version() == 8
    with Store.open(f"sqlite:///{path}") as s:
        assert schema_version(s) == 8
    with sqlite3.connect(path) as conn:
        assert conn.execute("select version from schema_version").fetchall() == [(8,)]


def test_newer_unknown_version_is_refused(path):
    Store.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("update schema_version set version = 9")
    with pytest.raises(StoreVersionError, match=r"schema version 9.*up to 8"):
        Store.open(path)


def test_older_version_is_migrated_once(path, monkeypatch):
    Store.open(path).close()  # a store at the current version
    current = store_mod.current_version()
    calls = []

    def next_version(conn):
        calls.append(1)
        conn.execute(sa.text("create table extra (x integer)"))

    monkeypatch.setattr(store_mod, "MIGRATIONS", [*store_mod.MIGRATIONS, next_version])
    with Store.open(path) as s:
        assert schema_version(s) == current + 1
    with Store.open(path) as s:
        assert schema_version(s) == current + 1
    assert calls == [1]
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*) from extra").fetchone() == (0,)


def test_foreign_database_is_refused(path):
    with sqlite3.connect(path) as conn:
        conn.execute("create table warnings (x integer)")
    with pytest.raises(StoreError, match="not a gpu-reclaim store"):
        Store.open(path)


def test_missing_driver_gives_clear_error(monkeypatch):
    # the test extra installs psycopg2: a None in sys.modules makes its import fail, as on a
    # machine without it
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    with pytest.raises(StoreError, match="driver is not installed") as info:
        Store.open("postgresql://u:secret@localhost/db")
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("url, message", [
    ("nosuchdb://host/x", "unknown database kind 'nosuchdb'"),
    ("sqlite:////nonexistent-dir/for/sure/x.sqlite", "cannot open the database"),
    ("postgresql+nosuchdriver://u:secret@host/db", "unknown database kind"),
])
def test_bad_url_gives_clear_error(url, message):
    with pytest.raises(StoreError, match=message) as info:
        Store.open(url)
    assert "secret" not in str(info.value)


# --------------------------------------------------------------------------- intents


def test_intents_set_replace_clear(store):
    assert store.intents() == {}
    store.set_intent("alice/", until=at(600), set_at=at(10), by="alice")
    store.set_intent("bob/big", until=at(300), set_at=at(11), by="admin")
    store.set_intent("alice/", until=at(700), set_at=at(20), by="alice")  # replaces
    got = store.intents()
    assert set(got) == {"alice/", "bob/big"}
    assert got["alice/"].until == at(700) and got["alice/"].set_at == at(20)
    assert store.clear_intent("bob/big", at(30)) is True
    assert store.clear_intent("bob/big", at(31)) is False
    assert set(store.intents()) == {"alice/"}


def test_naive_datetime_is_refused(store):
    with pytest.raises(ValueError, match="naive"):
        store.set_intent("alice/", until=dt.datetime(2026, 11, 2, 9), set_at=at(0))


def test_timezone_round_trip(store):
    cet = dt.timezone(dt.timedelta(hours=1))
    until = dt.datetime(2026, 11, 2, 21, 30, 15, 123456, tzinfo=cet)
    store.set_intent("alice/", until=until, set_at=at(0))
    got = store.intents()["alice/"].until
    assert got == until
    assert got.tzinfo == UTC and got.hour == 20 and got.microsecond == 123456
    assert store.intents()["alice/"].set_at.utcoffset() == dt.timedelta(0)


# --------------------------------------------------------------------------- warnings


def test_warning_idempotent_per_episode(store):
    w = warning()
    assert store.record_warning(w, "ep1", ["log", "email"]) is True
    assert store.record_warning(w, "ep1", ["log"]) is False  # same episode: never again
    assert store.record_warning(warning(t=at(61)), "ep1") is False  # same rule+episode, other time
    assert store.record_warning(warning(t=at(75), rule="max-age"), "ep1") is True  # another rule
    assert store.open_warnings().get("alice/", ()) == (w, warning(t=at(75), rule="max-age"))
    assert store.open_warnings().get("bob/big", ()) == ()
    assert set(store.open_warnings()) == {"alice/"}


def test_close_episode(store):
    store.record_warning(warning(t=at(60)), "ep1")
    store.record_warning(warning(t=at(70), rule="max-age"), "ep1")
    assert store.close_episode("alice/", [at(60)], t=at(80)) == 1
    assert store.open_warnings().get("alice/", ()) == (warning(t=at(70), rule="max-age"),)
    assert store.close_episode("alice/", t=at(81)) == 1
    assert store.open_warnings().get("alice/", ()) == ()
    # the closed episode is still never warned again; a new episode is
    assert store.record_warning(warning(t=at(60)), "ep1") is False
    assert store.record_warning(warning(t=at(200)), "ep2") is True
    assert store.open_warnings().get("alice/", ()) == (warning(t=at(200)),)


# --------------------------------------------------------------------------- reclaims


def test_reclaim_lifecycle(store):
    evidence = {"idle_since": at(0), "gpu_util": (0.0,), "note": "x"}
    rid = store.begin_reclaim("alice/", "gpu-idle", at(120), evidence, 1, episode="ep1")
    assert isinstance(rid, int)
    assert store.begin_reclaim("alice/", "gpu-idle", at(121), {}, 1, episode="ep1") is None
    [rec] = store.unfinished_reclaims()
    assert rec.outcome is None and rec.evidence == {"idle_since": "2026-11-02T08:00:00Z",
                                                     "gpu_util": [0.0], "note": "x"}
    # while unfinished, no other stop of the session either
    assert store.begin_reclaim("alice/", "max-age", at(122), {}, 1, episode="ep2") is None
    store.finish_reclaim(rid, at(125), "stuck", "pod still terminating")
    assert [r.id for r in store.stuck_reclaims()] == [rid]
    assert store.begin_reclaim("alice/", "max-age", at(126), {}, 1, episode="ep2") is None
    store.finish_reclaim(rid, at(130), "stopped")
    assert store.stuck_reclaims() == [] and store.unfinished_reclaims() == []
    [rec] = store.reclaims()
    assert (rec.outcome, rec.finished_at, rec.t, rec.gpus) == ("stopped", at(130), at(120), 1)
    # a later episode of the same session (server restarted, idle again) may be reclaimed
    rid2 = store.begin_reclaim("alice/", "gpu-idle", at(500), {}, 1, episode="ep2")
    assert rid2 is not None
    store.finish_reclaim(rid2, at(501), "failed", "hub 500")
    assert [r.id for r in store.reclaims(since=at(200))] == [rid2]
    with pytest.raises(ValueError):
        store.finish_reclaim(rid2, at(502), "gone")
    with pytest.raises(KeyError):
        store.finish_reclaim(9999, at(502), "stopped")
    # a stop that found the server already down (the hub's 404) is a reclaim done
    rid3 = store.begin_reclaim("alice/", "gpu-idle", at(600), {}, 1, episode="ep3")
    store.finish_reclaim(rid3, at(601), "already-stopped", "hub DELETE: HTTP 404")
    assert [(r.outcome, r.detail) for r in store.reclaims(since=at(600))] == [("stopped", "hub DELETE: HTTP 404")]


def test_reclaim_episode_defaults_to_open_warning(store):
    store.record_warning(warning(), "alice-idle-08:00")
    rid = store.begin_reclaim("alice/", "gpu-idle", at(120), {}, 1)
    store.finish_reclaim(rid, at(121), "stopped")
    assert store.reclaims()[0].episode == "alice-idle-08:00"
    assert store.begin_reclaim("alice/", "gpu-idle", at(122), {}, 1) is None


def test_restart_keeps_intents_and_warnings_and_refuses_duplicates(path):
    with Store.open(path) as s:
        s.set_intent("bob/big", until=at(600), set_at=at(10), by="bob")
        assert s.record_warning(warning(), "ep1", ["log"])
        rid = s.begin_reclaim("alice/", "gpu-idle", at(120), {"why": "idle"}, 1, episode="ep1")
        assert rid is not None
    # the service is killed and restarted
    with Store.open(path) as s:
        assert s.intents()["bob/big"].until == at(600)
        assert s.open_warnings().get("alice/", ()) == (warning(),)
        assert s.record_warning(warning(), "ep1", ["log"]) is False
        assert s.begin_reclaim("alice/", "gpu-idle", at(121), {}, 1, episode="ep1") is None
        [rec] = s.unfinished_reclaims()  # begun before the crash: check it again
        assert rec.id == rid and rec.evidence == {"why": "idle"}


def test_usable_from_asyncio_threads(store):
    async def main():
        results = await asyncio.gather(*[
            asyncio.to_thread(store.record_warning, warning(), "ep1") for _ in range(8)])
        return results

    assert sorted(asyncio.run(main())) == [False] * 7 + [True]


# --------------------------------------------------------------------------- observations, trace


def _record_cycles(store):
    store.record_observations(at(0), [], 0, sessions=[ALICE])
    for i in range(1, 4):
        t = at(i)
        store.record_observations(t, [
            SessionSample("alice/", Sample(t=t, gpu_util=(0.0,), gpu_mem_used_mib=(512.0,),
                                           kernels=(Kernel("idle", at(0)),), hub_last_activity=t)),
        ], pending_gpus=i, sessions=[ALICE])
    store.record_observations(at(6), [SessionSample("bob/big", Sample(t=at(6), gpu_util=(90.0, None), terminals=None)),
                                     SessionSample("alice/", Sample(t=at(6), gpu_util=None, kernels=None))],
                              pending_gpus=None, sessions=[ALICE, BOB])


def test_export_trace_is_a_valid_trace(store):
    _record_cycles(store)
    store.set_intent("alice/", until=at(300), set_at=at(2), by="alice")
    store.clear_intent("alice/", at(3))
    store.session_stopped("bob/big", at(8))
    lines = list(export_trace(store, at(0), at(10), sample_interval_s=60, gpus_total=8))
    records = loads_trace("\n".join(lines) + "\n")
    assert records[0] == TraceConfig(start=at(0), end=at(10), sample_interval_s=60, gpus_total=8)
    kinds = [type(r).__name__ for r in records[1:]]
    assert kinds.count("TraceSession") == 2 and kinds.count("SessionSample") == 5
    assert kinds.count("Pressure") == 4 and kinds.count("IntentChange") == 2
    sessions = {r.id: r for r in records if isinstance(r, TraceSession)}
    assert sessions["alice/"].session == ALICE and sessions["alice/"].stopped is None
    assert sessions["bob/big"].session == BOB and sessions["bob/big"].stopped == at(8)
    samples = [r for r in records if isinstance(r, SessionSample)]
    assert samples[0] == SessionSample("alice/", Sample(t=at(1), gpu_util=(0.0,), gpu_mem_used_mib=(512.0,),
                                                        kernels=(Kernel("idle", at(0)),), hub_last_activity=at(1)))
    assert samples[-2].sample == Sample(t=at(6), gpu_util=(90.0, None), terminals=None)
    assert Pressure(at(3), 3) in records
    assert [r for r in records if isinstance(r, IntentChange)] == [
        IntentChange(at(2), "alice/", at(300)), IntentChange(at(3), "alice/", None)]
    # a window and the typed reader
    recs = list(export_records(store, at(2), at(3)))
    assert [type(r).__name__ for r in recs].count("SessionSample") == 2
    assert recs[0].start == at(2)
    # an intent set before the window and still current at its start is in the trace
    store.set_intent("alice/", until=at(400), set_at=at(4))
    recs = list(export_records(store, at(5), at(10)))
    assert [r for r in recs if isinstance(r, IntentChange)] == [IntentChange(at(4), "alice/", at(400))]


def test_export_trace_sessions_param_and_reused_ids(store):
    # observations recorded without session lines: the caller supplies the sessions
    store.record_observations(at(1), [SessionSample("alice/", Sample(t=at(1), gpu_util=(5.0,)))], 0)
    restarted = Session(id="alice/", user="alice", server="", gpus=2, started=at(30))
    store.record_observations(at(31), [SessionSample("alice/", Sample(t=at(31), gpu_util=(1.0, 2.0)))], 0,
                              sessions=[restarted])
    store.record_observations(at(32), [SessionSample("ghost/", Sample(t=at(32), gpu_util=(1.0,)))], 0)
    assert [type(r).__name__ for r in loads_trace("\n".join(export_trace(store, at(0), at(40))))].count(
        "SessionSample") == 1  # alice's first instance and ghost have no session line: left out
    text = "\n".join(export_trace(store, at(0), at(40), sessions=[ALICE]))
    records = loads_trace(text)
    sessions = [r for r in records if isinstance(r, TraceSession)]
    assert [(s.session.gpus, s.stopped) for s in sessions] == [(1, at(30)), (2, None)]
    assert [r.sample.gpu_util for r in records if isinstance(r, SessionSample)] == [(5.0,), (1.0, 2.0)]


def test_export_empty_store(store):
    records = loads_trace("\n".join(export_trace(store, at(0), at(10))))
    assert records == [TraceConfig(start=at(0), end=at(10), sample_interval_s=60.0, gpus_total=0)]


def test_prune_observations(store):
    _record_cycles(store)
    store.record_decisions([Decision("alice/", "keep", "gpu-busy", "busy")], at(1))
    store.set_intent("alice/", until=at(300), set_at=at(1))
    store.record_warning(warning(t=at(1)), "ep1")
    total = len(list(export_trace(store, at(0), at(10)))) - 1
    deleted = store.prune_observations(at(3))
    assert deleted == 5  # pressure at 0; cycles 1 and 2: a sample and a pressure line each
    left = loads_trace("\n".join(export_trace(store, at(0), at(10))))
    assert len(left) - 1 == total - 5
    assert decided_sessions(store) == [] and "alice/" in store.intents() and store.open_warnings().get("alice/", ())


# --------------------------------------------------------------------------- decisions


def test_decisions_log(store):
    d = Decision("alice/", "warn", "gpu-idle", "GPU idle for 60 min", reclaim_at=at(120),
                 measured=Measured(latest_util=(0.0,)), idle_since=at(0))
    store.record_decisions([d], at(60))
    store.record_decisions([Decision("bob/big", "keep", "kernel-busy", "a kernel is busy")], at(61))
    # each change of rule, and each session's rule as a window opens (the usage page's reading)
    assert store.rules_between(at(0), at(70)) == [RuleChange(at(60), "alice/", "gpu-idle"),
                                                 RuleChange(at(61), "bob/big", "kernel-busy")]
    assert store.rules_between(at(61), at(70)) == [RuleChange(at(61), "alice/", "gpu-idle"),
                                                  RuleChange(at(61), "bob/big", "kernel-busy")]
    # the whole decision, as the database holds it
    (row,) = rows(store, "select action, reason, reclaim_at, evidence from decisions where session = :s", s="alice/")
    assert (row.action, row.reason) == ("warn", "GPU idle for 60 min") and row.reclaim_at is not None
    assert json.loads(row.evidence) == {"idle_since": "2026-11-02T08:00:00+00:00", "latest_util": [0.0]}
