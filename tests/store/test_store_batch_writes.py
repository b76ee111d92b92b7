"""The cycle's batch writes on SQLite (`store.engine._insert`): the rows go to sqlite3's
executemany as SQLAlchemy's own insert sends them, every column processed by its type —
compared, byte for byte, with what SQLAlchemy's insert writes of the same rows."""

from __future__ import annotations

import datetime as dt
import sqlite3

from jupyterhub_gpu_reclaim.policy.evidence import Deadline, Measured
from jupyterhub_gpu_reclaim.policy.observations import Decision, Kernel, Sample, Session, SessionSample
from jupyterhub_gpu_reclaim.store import Store, engine
from jupyterhub_gpu_reclaim.store.schema import ESCAPE, DecisionRow

from ..support.clock import START, at

PLUS_2 = dt.timezone(dt.timedelta(hours=2))
# names a user chose: a NUL (stored escaped), the escape itself, right-to-left text
SIDS = ["alice/", "bob/\x00x", f"mallory/{ESCAPE}0", "عمر/دفتر", "carol/gpu"]


def one_cycle(store: Store) -> None:
    """What a cycle writes, with every column type in it: decisions (a warning's reclaim
    time, evidence with times and per-GPU lists), samples (per-GPU numbers and their
    absence, kernels, terminals, a time in another zone), the pressure, new sessions
    (groups, admin, a shared GPU)."""
    t = at(30)
    assert store.record_decisions([
        Decision(SIDS[0], "warn", "gpu-idle", "idle for 30 min", reclaim_at=at(90).astimezone(PLUS_2),
                 measured=Measured(gpus=2, window_max_util=(0.0, None), latest_util=(0.0, 1.5)),
                 deadline=Deadline(warn_at=at(30), reclaim_at=at(90)), idle_since=at(0)),
        *(Decision(sid, "keep", "idle-culler", "inactive for 3 min, under the timeout",
                   measured=Measured(gpus=0, hub_last_activity=at(27), inactive=dt.timedelta(minutes=3)))
          for sid in SIDS[1:]),
    ], t) == len(SIDS)
    samples = [SessionSample(SIDS[0], Sample(t=t, gpu_util=(0.0, None), gpu_mem_used_mib=(512.0, 0.0),
                                             kernels=(Kernel("idle", at(20)), Kernel("busy", None)),
                                             terminals=(at(10), None), hub_last_activity=at(27))),
               SessionSample(SIDS[4], Sample(t=t.astimezone(PLUS_2), gpu_util=None))]
    sessions = [Session(SIDS[0], "alice", "", gpus=2, started=START, admin=True, profile="gpu-a100",
                        groups=frozenset({"gpu-users", "staff"}), gpu_type="NVIDIA-A100"),
                Session(SIDS[4], "carol", "gpu", gpus=1, started=START.astimezone(PLUS_2), gpu_shared=True)]
    assert store.record_observations(t, samples, 3, sessions) == 3


def dump(path) -> dict[str, list[tuple]]:
    """Every row of the tables a cycle writes, as SQLite holds them."""
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(f"select * from {table} order by rowid").fetchall()
                for table in ("decisions", "observations", "sessions")}


def test_the_rows_are_those_sqlalchemys_insert_writes(tmp_path, monkeypatch):
    with Store.open(tmp_path / "ours.sqlite") as store:
        one_cycle(store)
    monkeypatch.setattr(engine, "_prepared", lambda *args: None)  # every insert through SQLAlchemy's
    with Store.open(tmp_path / "sqlalchemy.sqlite") as store:
        one_cycle(store)
    ours, reference = dump(tmp_path / "ours.sqlite"), dump(tmp_path / "sqlalchemy.sqlite")
    assert [len(rows) for rows in ours.values()] == [5, 3, 2]
    assert ours == reference


def test_rows_that_leave_a_column_to_its_default_go_through_sqlalchemy(tmp_path):
    """The decisions' evidence defaults to "{}" (a Python-side default SQLAlchemy fills):
    rows without it are written with it."""
    with Store.open(tmp_path / "store.sqlite") as store:
        with store._session.begin() as db:
            engine._insert(db, [(DecisionRow, {"t": at(1), "session": sid, "action": "keep", "rule": "r",
                                               "reason": ""}) for sid in SIDS[:2]])
    assert [row[-1] for row in dump(tmp_path / "store.sqlite")["decisions"]] == ["{}", "{}"]

