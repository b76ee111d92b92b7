"""What users choose cannot make the cycle's records fail for others (issue 27): on SQLite and
on a real PostgreSQL (tests/support/postgres.py), the cycle (service.Reclaimer, in-process fakes for
the signals and the stopper: tests/support/harness.py) with a 250-character server name beside
other users' idle GPUs, a name no database can store, and a store whose records fail."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ..support.clock import at
from ..support.postgres import postgres, postgres_url  # noqa: F401 - fixtures
from ..support.store_reads import decided_sessions

LONG = "x" * 250  # JupyterHub 5 takes any server name without `/` (the hub answers 202)
USER = "student42"  # the session id, USER/LONG, is 260 characters: past a VARCHAR(255)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")


async def test_a_long_or_unstorable_server_name_holds_no_other_users_reclaim(harness, store_url):
    h = harness(store_url=store_url)
    alice = h.add("alice")
    long = h.add(USER, name=LONG)
    mallory = h.add("mallory", name="a\x00b")  # a NUL: PostgreSQL's text cannot hold it
    moe = h.add("moe", name="a\uffff0b")  # what the NUL's stored form looks like, chosen
    await h.run_until(at(90))

    assert [r.error for r in h.reports] == [None] * len(h.reports)  # every cycle ok
    # the NUL is stored escaped (a refused name was never warned, so never reclaimed: one
    # server name kept its GPU for good), and no name takes another's records
    for sid in (alice, long, mallory, moe):
        assert h.warned(sid) == [at(30)], sid
        assert h.stopped(sid) == [at(60)], sid
    assert sorted(r.session for r in h.store.reclaims()) == sorted([alice, long, mallory, moe])
    assert {alice, long, mallory, moe} <= set(decided_sessions(h.store))
    assert [r.session for r in h.store.reclaims(user="mallory")] == [mallory]
    assert ("mallory", "a\x00b") in h.stopper.calls
    assert not any("store" in p for r in h.reports for p in r.problems.values())
    assert h.metric("jupyterhub_gpu_reclaim_cycles_total", result="ok") == len(h.reports)


async def test_a_record_that_fails_never_skips_the_stops(harness, monkeypatch):
    h = harness()
    alice = h.add("alice")

    def fail(*args, **kwargs):
        raise sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))

    await h.run_until(at(55))
    monkeypatch.setattr(h.store, "record_decisions", fail)
    monkeypatch.setattr(h.store, "record_observations", fail)
    await h.run_until(at(60))
    assert h.stopped(alice) == [at(60)]
    assert [r.outcome for r in h.store.reclaims()] == ["stopped"]
    assert "database is locked" in h.reports[-1].error  # the cycle counts as failed all the same
