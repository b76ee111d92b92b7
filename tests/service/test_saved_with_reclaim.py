"""Save before the stop (issue 38, points 1 and 4) in the cycle, with in-process fakes
(tests/support/harness.py): the stop of a reclaim first asks the server's tabs to save and
keeps their answer with the reclaim (its own server, named); a server that does not answer
leaves it not known; the dry run asks them what they would save, saves nothing and keeps
that in its decisions log; with save_before_stop = 0 nobody is asked. The server's side on a
real jupyter-server: tests/lab/test_saving.py; all of it in Chromium:
tests/lab/test_save_before_stop.py."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.policy.observations import SavedDoc, WhatSaved

from ..support.clock import at
from ..support.store_reads import decisions_of

SAVED = WhatSaved(1, (SavedDoc("train <b>model</b>.ipynb", "saved", at(59), "lead"),
                      SavedDoc("untitled.txt", "conflict", at(60), "stop")))


async def test_a_reclaim_asks_the_tabs_first_and_keeps_what_they_saved(harness):
    h = harness()
    alice, bob = h.add("alice", name="gpu"), h.add("bob")
    h.kernels.saved["/user/alice/gpu"] = SAVED  # bob's server does not answer
    await h.run_until(at(70))

    assert h.stopped(alice) == [at(60)] and h.stopped(bob) == [at(60)]
    assert sorted(h.kernels.asks) == [("/user/alice/gpu", False, 15.0), ("/user/bob/", False, 15.0)]
    by_session = {r.session: r for r in h.store.reclaims()}
    assert by_session[alice].saved == SAVED and alice == "alice/gpu"  # the named server's record
    assert by_session[bob].saved is None


async def test_the_dry_run_records_what_the_tabs_would_have_saved(harness):
    h = harness(dry_run=True)
    sid = h.add("alice")
    would = WhatSaved(1, (SavedDoc("a.ipynb", "would-save", at(60), "stop"),))
    h.kernels.saved["/user/alice/"] = would
    await h.run_until(at(70))

    assert h.store.reclaims() == [] and h.stopper.calls == []
    assert h.kernels.asks == [("/user/alice/", True, 15.0)]  # once per episode, as the dry run reports
    (would_save,) = [d.evidence["would_save"] for _, d in decisions_of(h.store, sid) if "would_save" in d.evidence]
    assert would_save == would.shown()


async def test_with_no_wait_nobody_is_asked(harness):
    h = harness(save_before_stop=0)
    alice = h.add("alice")
    h.kernels.saved["/user/alice/"] = SAVED
    await h.run_until(at(70))
    assert h.stopped(alice) == [at(60)] and h.kernels.asks == []
    assert h.store.reclaims()[0].saved is None
