"""Schema v8: what a reclaimed server's JupyterLab tabs saved before the stop, kept with its
reclaim, on SQLite and on a real PostgreSQL (tests/support/postgres.py). The names come from
the user's server (markup, right-to-left overrides, emoji) and come back as they went in; a
v7 store is upgraded in place, its reclaims' `saved` not known."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from jupyterhub_gpu_reclaim.policy.observations import SavedDoc, WhatSaved
from jupyterhub_gpu_reclaim.signals.kernels import saved_from_model
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.store import schema as store_mod

from ..support.clock import at
from ..support.postgres import postgres, postgres_url  # noqa: F401 - fixtures
from ..support.store_reads import schema_version

HOSTILE = ['Modèle <b onmouseover="x">gras 🙂\u202egnp.ipynb', "untitled.txt", "a\x00b.ipynb"]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")


def test_what_was_saved_round_trips_with_its_reclaim(url):
    saved = WhatSaved(2, (SavedDoc(HOSTILE[0], "saved", at(9), "stop"), SavedDoc(HOSTILE[1], "saved", at(5), "lead"),
                          SavedDoc(HOSTILE[2], "conflict", at(9), "stop")), 0)
    with Store.open(url) as s:
        rid = s.begin_reclaim("alice/gpu", "gpu-idle", at(10), {}, 1)
        none = s.begin_reclaim("bob/", "gpu-idle", at(10), {}, 1)
        empty = s.begin_reclaim("carol/", "gpu-idle", at(10), {}, 1)
        assert rid is not None and none is not None and empty is not None
        s.record_saved(rid, saved)
        s.record_saved(empty, WhatSaved(0))
    with Store.open(url) as s:
        by_session = {r.session: r for r in s.reclaims()}
        assert by_session["alice/gpu"].saved == saved
        assert by_session["bob/"].saved is None  # not known: nobody asked
        assert by_session["carol/"].saved == WhatSaved(0)  # asked: no tab was open


def test_a_v7_store_is_upgraded_its_reclaims_saved_not_known(url):
    with Store.open(url) as s:
        s.begin_reclaim("alice/", "gpu-idle", at(10), {"idle_since": "x"}, 1)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # as the v7 release left it: no `saved` column
        conn.execute(sa.text("ALTER TABLE reclaims DROP COLUMN saved"))
        conn.execute(sa.text("UPDATE schema_version SET version = 7"))
    engine.dispose()
    with Store.open(url) as s:
        assert schema_version(s) == store_mod.current_version() == 8
        (old,) = s.reclaims()
        assert old.saved is None and old.evidence == {"idle_since": "x"}


def test_the_servers_answer_is_read_as_untrusted():
    """What a user's server answers: anything malformed is left out and counted, never
    trusted; an answer that is not one is not known."""
    good = {"path": "a.ipynb", "outcome": "saved", "at": "2026-12-06T10:00:00Z", "reason": "lead", "message": ""}
    answer = {"tabs": 1, "documents": [good, {"path": "x" * 5000, "outcome": "saved"}, {"path": "b", "outcome": "rm -rf"},
                                       {"path": "c\ud800", "outcome": "saved"}, "not an object",
                                       {"path": "d", "outcome": "saved", "reason": "whenever"}]}
    saved = saved_from_model(answer)
    assert saved is not None and saved.tabs == 1 and saved.more == 5
    assert saved.documents == (SavedDoc("a.ipynb", "saved", dt.datetime(2026, 12, 6, 10, tzinfo=dt.timezone.utc),
                                        "lead"),)
    for bad in (None, [], {"tabs": -1, "documents": []}, {"tabs": True, "documents": []}, {"tabs": 1}):
        assert saved_from_model(bad) is None
    many = saved_from_model({"tabs": 3, "documents": [dict(good, path=f"{i}.ipynb") for i in range(5000)]})
    assert many is not None and len(many.documents) == 50 and many.more == 4950
