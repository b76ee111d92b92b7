"""The way back (issue 38, point 3) in the cycle, with in-process fakes (tests/support/harness.py):
a reclaim keeps what its kernels' probe said ran in the server; the dry run records in its
decision what it would have kept; a server that did not say leaves it not known."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.policy.observations import Ran, WhatRan

from ..support.clock import at
from ..support.store_reads import decisions_of

RAN = WhatRan.of([Ran("notebook", "train <b>model</b>.ipynb", at(1)), Ran("terminal", "1", at(2)),
                  Ran("console", "Console 1", None)])


async def test_a_reclaim_keeps_what_ran_from_the_probe_of_its_cycle(harness):
    h = harness()
    alice, bob = h.add("alice"), h.add("bob")
    h.kernels.ran["/user/alice/"] = RAN  # bob's server does not say (its /api/sessions failed)
    await h.run_until(at(70))

    assert h.stopped(alice) == [at(60)] and h.stopped(bob) == [at(60)]
    by_session = {r.session: r for r in h.store.reclaims()}
    assert by_session[alice].ran == RAN
    assert by_session[bob].ran is None


async def test_the_dry_run_records_what_it_would_have_kept(harness):
    h = harness(dry_run=True)
    sid = h.add("alice")
    h.kernels.ran["/user/alice/"] = RAN
    await h.run_until(at(70))

    assert h.store.reclaims() == [] and h.stopper.calls == []
    (t, reclaim), = [(t, d) for t, d in decisions_of(h.store, sid) if d.action == "reclaim"]
    assert t == at(60)
    assert reclaim.evidence["ran"] == RAN.shown()
    assert reclaim.evidence["ran"]["ran"][0] == {"kind": "terminal", "path": "1", "last_activity": at(2).isoformat()}
