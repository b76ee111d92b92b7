"""Schema v7: what ran in a reclaimed server, kept with its reclaim, on SQLite and on a real
PostgreSQL (tests/support/postgres.py). Names a user chose (markup, a NUL, right-to-left
overrides, emoji, a lone surrogate) come back as they went in or are left out and counted;
thousands of kernels are capped; a v6 store is upgraded in place, its reclaims' `ran` not
known."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.policy.observations import MAX_RAN, Ran, WhatRan
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store import schema as store_mod

from ..support.clock import at
from ..support.postgres import postgres, postgres_url  # noqa: F401 - fixtures
from ..support.store_reads import schema_version

HOSTILE = ["<script>alert(1)</script>.ipynb", "a\x00b/c.ipynb", "\u202egnp.exe.ipynb", "ümlaut 🙂/ノート.ipynb",
           "../../hub/logout", "x" * 1000 + ".ipynb", "q?a=1#frag &amp; %2e%2e.ipynb"]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")


def test_what_ran_round_trips_with_its_reclaim(url):
    ran = WhatRan.of([Ran("notebook", p, at(i)) for i, p in enumerate(HOSTILE)]
                     + [Ran("terminal", "1", None), Ran("console", "bad\ud800.ipynb", at(1)), Ran("notebook", "", at(2))])
    assert ran.more == 2  # the lone surrogate and the empty path: left out, counted
    assert [r.path for r in ran.ran[:2]] == [HOSTILE[-1], HOSTILE[-2]]  # the latest active first
    assert ran.ran[-1] == Ran("terminal", "1", None)  # no activity known: last
    with Store.open(url) as s:
        rid = s.begin_reclaim("alice/", "gpu-idle", at(10), {}, 1, ran=ran)
        none = s.begin_reclaim("bob/", "gpu-idle", at(10), {}, 1)
        assert rid is not None and none is not None
        s.finish_reclaim(rid, at(11), "stopped")
    with Store.open(url) as s:
        by_session = {r.session: r for r in s.reclaims()}
        assert by_session["alice/"].ran == ran
        assert by_session["bob/"].ran is None  # not known
        assert s.unseen_reclaims("alice", at(0))[0].ran == ran


def test_thousands_of_kernels_are_capped(url):
    ran = WhatRan.of([Ran("notebook", f"run-{i}.ipynb", at(seconds=i)) for i in range(5000)])
    assert len(ran.ran) == MAX_RAN and ran.more == 5000 - MAX_RAN
    with Store.open(url) as s:
        s.begin_reclaim("alice/", "gpu-idle", at(10), {}, 1, ran=ran)
        assert s.reclaims()[0].ran == ran


def test_a_v6_store_is_upgraded_its_reclaims_ran_not_known(url):
    with Store.open(url) as s:
        s.begin_reclaim("alice/", "gpu-idle", at(10), {"idle_since": "x"}, 1)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # as the v6 release left it: no `ran` column
        conn.execute(sa.text("ALTER TABLE reclaims DROP COLUMN ran"))
        conn.execute(sa.text("UPDATE schema_version SET version = 6"))
    engine.dispose()
    with Store.open(url) as s:
        assert schema_version(s) == store_mod.current_version() == 8
        (old,) = s.reclaims()
        assert old.ran is None and old.evidence == {"idle_since": "x"}
        ran = WhatRan.of([Ran("notebook", "train.ipynb", at(9))])
        s.finish_reclaim(old.id, at(11), "stopped")
        s.begin_reclaim("alice/", "gpu-idle", at(20), {}, 1, ran=ran)
        assert [r.ran for r in s.reclaims()] == [None, ran]
