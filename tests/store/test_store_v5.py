"""Schema v5 and what users choose, on SQLite and on a real PostgreSQL (tests/support/postgres.py):
server and user names of any length (JupyterHub 5 takes any server name without `/`; a
250-character one made every cycle fail on PostgreSQL's VARCHAR(255), issue 27), rows one
session's name keeps out of the database without keeping the others' out, a v4 store
upgraded in place, and a user's reclaims matched by the exact name ("Ann" is not "ann")."""

from __future__ import annotations


import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.policy.observations import Decision, Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.policy.observations import Warning as Warned
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store import schema as store_mod
from jupyterhub_gpu_reclaim.store.engine import ROWS_AT_ONCE, RowsRefused
from jupyterhub_gpu_reclaim.store.schema import ESCAPE

from ..support.clock import START, at
from ..support.postgres import postgres, postgres_url  # noqa: F401 - fixtures
from ..support.store_reads import decided_sessions, schema_version

LONG = "x" * 250  # the finding's server name: student42/LONG is 260 characters, past a VARCHAR(255)
LONG_USER = "u" * 300  # a hub on SQLite does not enforce its own Unicode(255) either
NUL = "mallory/a\x00b"  # JupyterHub 5 on a SQLite hub database keeps a NUL in a server name


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(url):
    with Store.open(url) as s:
        yield s


def session(sid: str, gpus: int = 1) -> Session:
    user, _, server = sid.partition("/")
    return Session(id=sid, user=user, server=server, gpus=gpus, started=START)


def test_names_of_any_length_are_stored_and_read_back(store):
    sids = [f"student42/{LONG}", f"{LONG_USER}/{LONG}", "alice/"]
    store.record_decisions([Decision(sid, "warn", "gpu-idle", "idle", reclaim_at=at(90)) for sid in sids], at(30))
    assert store.record_observations(at(30), [SessionSample(sid, Sample(t=at(30), gpu_util=(0.0,))) for sid in sids], 0,
                                     [session(sid) for sid in sids]) == 4
    for sid in sids:
        assert store.record_warning(Warned(session=sid, t=at(30), rule="gpu-idle", reclaim_at=at(90)), "e")
        store.set_intent(sid, at(120), at(31), by=sid.partition("/")[0])
        store.set_exemption(sid, at(120), at(31), by=LONG_USER)
        store.audit(LONG_USER, "keepalive", sid)
        rid = store.begin_reclaim(sid, "gpu-idle", at(90), {}, 1, episode="e")
        store.finish_reclaim(rid, at(91), "stopped")
        assert store.session_stopped(sid, at(91))
    assert decided_sessions(store) == sids
    assert set(store.intents()) == set(store.exemptions(at(60))) == set(sids)
    assert [r.session for r in store.reclaims(user=LONG_USER)] == [f"{LONG_USER}/{LONG}"]
    assert {getattr(o, "session", None) for o in store.observations_between(START, at(60)).observations} == {
        *sids, None}
    assert {a.session for a in store.audit_log()} == set(sids)


def test_a_nul_is_stored_escaped_and_every_name_comes_back_as_it_was(store):
    """A NUL cannot go into PostgreSQL's text, and JupyterHub 5 on a SQLite hub database keeps
    one in a server name: refused, that server was never warned, so never reclaimed. It is
    stored escaped; a name spelled like the escape stays apart from it."""
    lookalike = NUL.replace("\x00", ESCAPE + "0")
    sids = ["alice/", NUL, lookalike, f"mallory/{ESCAPE}", "bob/x"]
    store.record_decisions([Decision(sid, "keep", "gpu-active", "busy") for sid in sids], at(1))
    assert decided_sessions(store) == sids
    store.record_observations(at(1), [SessionSample(sid, Sample(t=at(1), gpu_util=(0.0,))) for sid in sids], 2,
                              [session(sid) for sid in sids])
    assert [s.session.id for s in store.observations_between(START, at(2)).sessions] == sids
    assert store.record_warning(Warned(session=NUL, t=at(1), rule="gpu-idle", reclaim_at=at(9)), "e")
    assert list(store.open_warnings()) == [NUL]
    rid = store.begin_reclaim(NUL, "gpu-idle", at(9), {}, 1, episode="e")
    store.finish_reclaim(rid, at(10), "stopped")
    assert [r.session for r in store.reclaims(user=NUL.partition("/")[0])] == [NUL]
    assert store.session_stopped(NUL, at(10)) and store.close_episode(NUL, t=at(10)) == 1


def test_rows_the_store_refuses_keep_only_their_own_session_out(store):
    """What no database (nor the hub) can hold, a lone surrogate, is refused alike on SQLite
    and PostgreSQL: that session's rows only; every other session's are written."""
    odd = "mallory/\ud800"
    sids = ["alice/", odd, "bob/x"]
    with pytest.raises(RowsRefused) as refused:
        store.record_decisions([Decision(sid, "keep", "gpu-active", "busy") for sid in sids], at(1))
    assert set(refused.value.refused) == {odd} and "surrogate" in str(refused.value)
    assert decided_sessions(store) == ["alice/", "bob/x"]
    with pytest.raises(RowsRefused) as refused:
        store.record_observations(at(1), [SessionSample(sid, Sample(t=at(1), gpu_util=(0.0,))) for sid in sids], 2,
                                  [session(sid) for sid in sids])
    assert set(refused.value.refused) == {odd}
    stored = store.observations_between(START, at(2))
    assert [(type(o).__name__, getattr(o, "session", None)) for o in stored.observations] == [
        ("SessionSample", "alice/"), ("SessionSample", "bob/x"), ("Pressure", None)]
    # what the cycle does when the session goes: nothing of it is stored, nothing fails
    assert store.session_stopped(odd, at(2)) is False and store.close_episode(odd, t=at(2)) == 0
    with pytest.raises(sa.exc.StatementError, match="cannot be stored: it is not valid Unicode"):
        store.set_intent(odd, at(60), at(1))


def test_decisions_of_more_servers_than_one_transaction_holds_keep_only_a_refused_one_out(store):
    """A first cycle records every server's decision, ROWS_AT_ONCE to a transaction: a
    session refused in the second of three keeps out only its own row, the rows of the
    first and the third are written, in order."""
    sids = [f"u{i:05d}/" for i in range(2 * ROWS_AT_ONCE + 10)]
    odd = sids[ROWS_AT_ONCE + 3] = "mallory/\ud800"
    with pytest.raises(RowsRefused) as refused:
        store.record_decisions([Decision(sid, "keep", "idle-culler", "inactive") for sid in sids], at(1))
    assert set(refused.value.refused) == {odd}
    assert decided_sessions(store) == [sid for sid in sids if sid != odd]


def test_a_row_the_database_refuses_keeps_only_its_own_session_out(store):
    """Whatever else the database refuses in one session's rows (here a trigger refuses
    mallory's) fails the batch; each session's rows are then written on their own."""
    with store.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(sa.text("CREATE TRIGGER refuse BEFORE INSERT ON decisions WHEN NEW.session = 'mallory/' "
                                 "BEGIN SELECT RAISE(ABORT, 'refused by the database'); END"))
        else:
            conn.execute(sa.text("CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF NEW.session = "
                                 "'mallory/' THEN RAISE EXCEPTION 'refused by the database'; END IF; "
                                 "RETURN NEW; END $$ LANGUAGE plpgsql"))
            conn.execute(sa.text("CREATE TRIGGER refuse BEFORE INSERT ON decisions FOR EACH ROW "
                                 "EXECUTE FUNCTION refuse()"))
    with pytest.raises(RowsRefused) as refused:
        store.record_decisions([Decision(sid, "keep", "gpu-active", "busy")
                                for sid in ("alice/", "mallory/", "bob/")], at(1))
    assert list(refused.value.refused) == ["mallory/"] and "refused by the database" in str(refused.value)
    assert decided_sessions(store) == ["alice/", "bob/"]
    with pytest.raises(sa.exc.DBAPIError, match="refused by the database"):  # all refused: the database's error
        store.record_decisions([Decision("mallory/", "keep", "gpu-active", "busy")], at(2))


def make_v4(url: str) -> None:
    """A store as release 4 wrote it: what users choose in VARCHAR(255) columns, a row in each
    of the tables the cycle writes."""
    v4 = sa.MetaData()
    for table in store_mod.Base.metadata.sorted_tables:
        copy = table.to_metadata(v4)
        for column in copy.columns:
            if isinstance(column.type, store_mod.UserText):
                column.type = sa.String(255)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        v4.create_all(conn)
        conn.execute(sa.insert(v4.tables["schema_version"]).values(id=1, version=4))
        t = at(1)  # the copied columns keep the store's types
        conn.execute(sa.insert(v4.tables["decisions"]).values(t=t, session="alice/", action="keep", rule="r",
                                                              reason="", evidence="{}"))
        conn.execute(sa.insert(v4.tables["intents"]).values(session="alice/", until=t, set_at=t, by="alice"))
    engine.dispose()


def test_a_v4_store_is_upgraded_to_unbounded_names(url):
    make_v4(url)
    with Store.open(url) as s:
        assert schema_version(s) == store_mod.current_version() == 8
        assert decided_sessions(s) == ["alice/"] and set(s.intents()) == {"alice/"}
        s.record_decisions([Decision(f"student42/{LONG}", "keep", "gpu-active", "busy")], at(2))
        s.set_intent(f"student42/{LONG}", at(60), at(2), by=LONG_USER)
        assert set(s.intents()) == {"alice/", f"student42/{LONG}"}
        with s.engine.connect() as conn:
            columns = {c["name"]: c["type"] for c in sa.inspect(conn).get_columns("intents")}
            if conn.dialect.name == "postgresql":
                assert isinstance(columns["session"], sa.Text) and isinstance(columns["by"], sa.Text)
            indexes = {i["name"]: i["unique"] for i in sa.inspect(conn).get_indexes("intents")}
            assert indexes["uq_intents_session"]  # kept through the change of type
    with Store.open(url) as s:  # once
        assert schema_version(s) == store_mod.current_version()


def test_a_users_reclaims_are_matched_by_the_exact_name(store):
    """SQLite's LIKE ignores case: "Ann" once read ann's reclaims, saw her notice and
    dismissed it."""
    ids = {}
    for sid in ("ann/", "Ann/", "ann/x", "anne/", "ann_/", "ANN/"):
        ids[sid] = store.begin_reclaim(sid, "gpu-idle", at(10), {}, 1, episode="e")
        store.finish_reclaim(ids[sid], at(11), "stopped")
    assert [r.session for r in store.reclaims(user="Ann")] == ["Ann/"]
    assert [r.session for r in store.reclaims(user="ann")] == ["ann/", "ann/x"]
    assert [r.session for r in store.unseen_reclaims("Ann", since=START)] == ["Ann/"]
    assert store.mark_seen("Ann", ids["ann/"], at(20)) is None  # not hers: nothing changes
    assert [r.session for r in store.unseen_reclaims("ann", since=START)] == ["ann/", "ann/x"]
    assert store.mark_seen("Ann", ids["Ann/"], at(20)) == "Ann/"
    assert store.reclaims(user="an") == []
