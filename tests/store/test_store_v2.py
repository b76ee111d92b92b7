"""Schema v2 of the store (the web pages' exemptions and audit log): a v1 store made by
the previous release is upgraded in place, keeping its data."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.store import schema as store_mod
from jupyterhub_gpu_reclaim.store import Store

from ..support.clock import START, at
from ..support.store_reads import schema_version


@pytest.fixture
def path(tmp_path):
    return tmp_path / "store.sqlite"


def make_v1(path):
    """A store as release 1 wrote it: the v1 tables, version 1, an intent."""
    engine = sa.create_engine(f"sqlite:///{path}")
    v2_only = {"exemptions", "audit"}
    with engine.begin() as conn:
        store_mod.Base.metadata.create_all(
            conn, tables=[t for n, t in store_mod.Base.metadata.tables.items() if n not in v2_only])
        conn.execute(sa.insert(store_mod.SchemaVersion).values(id=1, version=1))
        conn.execute(sa.insert(store_mod.IntentRow).values(
            session="alice/", until=at(hours=1),
            set_at=START, by="alice"))
    engine.dispose()


def test_v1_store_is_upgraded_to_v2_keeping_its_data(path):
    make_v1(path)
    with sqlite3.connect(path) as conn:
        assert {r[0] for r in conn.execute("select name from sqlite_master where type='table'")} >= {"intents"}
        assert "audit" not in {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    with Store.open(path) as s:
        assert schema_version(s) == store_mod.current_version()
        assert s.intents()["alice/"].until == at(hours=1)
        s.set_exemption("alice/", at(hours=3), START, by="admin")
        s.audit("admin", "exempt", "alice/", t=START, hours=3)
    with Store.open(path) as s:  # reopening does not migrate again
        assert schema_version(s) == store_mod.current_version()
        assert s.exemptions(at(hours=1))["alice/"].by == "admin"
        assert s.audit_log()[0].detail == {"hours": 3}


def test_exemptions_expire_and_are_replaced(path):
    with Store.open(path) as s:
        s.set_exemption("bob/x", at(hours=2), START, by="admin")
        assert set(s.exemptions(START)) == {"bob/x"}
        assert s.exemptions(at(hours=2)) == {}
        s.set_exemption("bob/x", at(1), at(seconds=30), by="admin")
        assert set(s.exemptions(at(seconds=30))) == {"bob/x"}  # the new one replaced it
        assert s.exemptions(at(hours=1)) == {}


def test_audit_log_filters_and_refuses_naive_times(path):
    with Store.open(path) as s:
        s.audit("admin", "reclaim", "alice/", t=START)
        s.audit("root", "exempt", "bob/", t=at(5), hours=1)
        assert [r.actor for r in s.audit_log(session="bob/")] == ["root"]
        assert [r.action for r in s.audit_log(since=at(1))] == ["exempt"]
        with pytest.raises(ValueError, match="naive"):
            s.audit("admin", "x", t=dt.datetime(2026, 1, 1))
