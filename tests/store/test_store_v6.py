"""Schema v6: the observations in typed rows, on SQLite and on a real PostgreSQL
(tests/support/postgres.py). A v5 store, its samples, pressure and session instances written
as trace lines the way the v5 release wrote them, is upgraded in place: the replays and the
service's memory after a restart read the same from it as from a store that recorded the
same cycles as v6, names a user chose (a NUL, 250 characters) included."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.policy.observations import Kernel, Pressure, Sample, Session, SessionInstance, SessionSample
from jupyterhub_gpu_reclaim.replay.trace import TraceSession, dump_record
from jupyterhub_gpu_reclaim.replay.trace_export import export_records, export_trace
from jupyterhub_gpu_reclaim.service.sample_history import SampleHistory
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store import schema as store_mod

from ..support.clock import at
from ..support.postgres import postgres, postgres_url  # noqa: F401 - fixtures
from ..support.store_reads import schema_version

LONG = "student42/" + "x" * 250
NUL = "mallory/a\x00b"
ALICE = Session(id="alice/", user="alice", server="", gpus=1, started=at(0), profile="a100",
                groups=frozenset({"physics", "staff"}), gpu_type="A100")
BOB = Session(id="bob/big", user="bob", server="big", gpus=2, started=at(1), admin=True, gpu_shared=True)
ODD = [Session(id=LONG, user="student42", server="x" * 250, gpus=1, started=at(2)),
       Session(id=NUL, user="mallory", server="a\x00b", gpus=1, started=at(2))]
RESTARTED = Session(id="alice/", user="alice", server="", gpus=2, started=at(20))


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")


def cycles() -> list[tuple[dt.datetime, list[SessionSample], int | None, list[Session]]]:
    """What the cycle records: (t, samples, pending GPUs, sessions), every field of a sample
    used, a session restarted with another GPU count."""
    out = []
    for i in range(1, 30):
        t = at(i) + dt.timedelta(microseconds=123 * i)
        alice = RESTARTED if i >= 20 else ALICE
        samples = [SessionSample(alice.id, Sample(
            t=t, gpu_util=(float(i),) * alice.gpus, gpu_mem_used_mib=(512.5,) * alice.gpus,
            kernels=(Kernel("idle", at(0)), Kernel("busy\x00\ud800", None)), terminals=(at(0), None),
            hub_last_activity=t))]
        if i < 12:
            samples.append(SessionSample(BOB.id, Sample(t=t, gpu_util=(90.0, None) if i % 3 else None, gpu_mem_used_mib=None,
                                                        kernels=None if i % 2 else (),
                                                        terminals=None if i % 5 else ())))
        samples += [SessionSample(s.id, Sample(t=t, gpu_util=(0.0,))) for s in ODD]
        out.append((t, samples, i if i % 4 else None, [alice, *ODD] + ([BOB] if i < 12 else [])))
    return out


def make_v5(url: str) -> None:
    """A store as the v5 release wrote it: its observations as trace lines (`observations.line`,
    `trace_sessions.line`, by the v5 code's own `dump_record`), bob stopped at 12."""
    v5 = sa.MetaData()
    for table in store_mod.Base.metadata.sorted_tables:
        if table.name not in ("observations", "sessions"):
            table.to_metadata(v5)
    observations = sa.Table("observations", v5, sa.Column("id", sa.Integer, primary_key=True),
                            sa.Column("t", store_mod.UTCDateTime, nullable=False, index=True),
                            sa.Column("kind", sa.String(16), nullable=False),
                            sa.Column("session", store_mod.UserText), sa.Column("line", sa.Text, nullable=False))
    sessions = sa.Table("trace_sessions", v5, sa.Column("session", store_mod.UserText, primary_key=True),
                        sa.Column("started", store_mod.UTCDateTime, primary_key=True),
                        sa.Column("stopped", store_mod.UTCDateTime), sa.Column("line", sa.Text, nullable=False))
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        v5.create_all(conn)
        conn.execute(sa.insert(v5.tables["schema_version"]).values(id=1, version=5))
        known = set()
        for t, samples, pending, met in cycles():
            for s in samples:
                conn.execute(sa.insert(observations).values(
                    t=s.t, kind="sample", session=s.session, line=dump_record(s)))
            if pending is not None:
                conn.execute(sa.insert(observations).values(
                    t=t, kind="pressure", session=None, line=dump_record(Pressure(t=t, pending_gpus=pending))))
            for s in met:
                if (s.id, s.started) not in known:
                    known.add((s.id, s.started))
                    conn.execute(sa.insert(sessions).values(session=s.id, started=s.started, stopped=None,
                                                            line=dump_record(TraceSession(session=s))))
        conn.execute(sa.update(sessions).where(sessions.c.session == BOB.id).values(stopped=at(12)))
    engine.dispose()


def record_v6(store: Store) -> None:
    """The same cycles, recorded by this release."""
    for t, samples, pending, met in cycles():
        store.record_observations(t, samples, pending, met)
    assert store.session_stopped(BOB.id, at(12))


def test_a_v5_store_is_upgraded_to_typed_rows(url, tmp_path):
    make_v5(url)
    with Store.open(f"sqlite:///{tmp_path / 'v6.sqlite'}") as fresh, Store.open(url) as upgraded:
        record_v6(fresh)
        assert schema_version(upgraded) == store_mod.current_version() == 8
        with upgraded.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            assert "trace_sessions" not in tables and "observations_v5" not in tables
            assert "line" not in {c["name"] for c in sa.inspect(conn).get_columns("observations")}
        # the replays read the same trace from both, line for line
        assert list(export_trace(upgraded, at(0), at(40))) == list(export_trace(fresh, at(0), at(40)))
        records = list(export_records(upgraded, at(0), at(40)))
        assert records == list(export_records(fresh, at(0), at(40)))
        sessions = [r for r in records if isinstance(r, TraceSession)]
        assert [(r.session, r.stopped) for r in sessions] == [
            (ALICE, at(20)), (BOB, at(12)), *((s, None) for s in ODD), (RESTARTED, None)]
        samples = [r for r in records if isinstance(r, SessionSample)]
        assert samples[0] == cycles()[0][1][0]  # every field, the microseconds too
        assert {r.session for r in samples} == {ALICE.id, BOB.id, LONG, NUL}
        # all but the odd names' first, taken before their instances started
        assert len(samples) == sum(len(c[1]) for c in cycles()) - len(ODD)
        assert [(r.t, r.pending_gpus) for r in records if isinstance(r, Pressure)] == [
            (t, p) for t, _, p, _ in cycles() if p is not None]
        # the service's memory after a restart, and the pages' usage
        for store in (upgraded, fresh):
            history = SampleHistory(PolicyConfig(), dt.timedelta(minutes=1))
            history.restore(store, at(30))
            assert history.of(RESTARTED.id) == [s.sample for _, ss, _, _ in cycles()[19:] for s in ss if s.session == ALICE.id]
            assert len(history.of(NUL)) == len(history.of(LONG)) == 28
            assert history.recorded == {(ALICE.id, at(0)), (BOB.id, at(1)), (LONG, at(2)), (NUL, at(2)),
                                        (ALICE.id, at(20))}
        assert upgraded.gpu_instances_between(at(0), at(40)) == fresh.gpu_instances_between(at(0), at(40))
        assert upgraded.pressure_between(at(0), at(40)) == fresh.pressure_between(at(0), at(40))
        # the upgraded store goes on recording after the rows it kept
        t = at(31)
        upgraded.record_observations(t, [SessionSample(NUL, Sample(t=t, gpu_util=(1.0,)))], 5, ODD)
        assert upgraded.observations_between(t, t).observations == [
            SessionSample(NUL, Sample(t=t, gpu_util=(1.0,))), Pressure(t, 5)]
    with Store.open(url) as again:  # upgraded once
        assert schema_version(again) == store_mod.current_version()


def test_the_store_keeps_a_sample_as_it_came(url):
    """Every field of a sample comes back as it went in: None (no answer) apart from an empty
    list, None per GPU, times to the microsecond, what a user's server reports as a kernel's
    state (a NUL, a lone surrogate) as it reported it."""
    with Store.open(url) as store:
        record_v6(store)
        stored = store.observations_between(at(0), at(40))
        written = [s for _, samples, _, _ in cycles() for s in samples]
        assert [o for o in stored.observations if isinstance(o, SessionSample)] == written
        assert set(stored.sessions) == {SessionInstance(ALICE), SessionInstance(BOB, at(12)),
                                        SessionInstance(RESTARTED), *map(SessionInstance, ODD)}
