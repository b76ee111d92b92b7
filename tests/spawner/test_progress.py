"""The spawner's progress stream when the spawn ends: JupyterHub stops reading it by cancelling
the pending `__anext__` (jupyterhub.utils.iterate_until) and then awaits that task expecting
CancelledError. A generator that swallows the cancellation and returns instead makes the hub's
progress handler die with `RuntimeError: async generator raised StopAsyncIteration`, and the
spawn page never gets its final "failed" event (seen on JupyterHub 5.5 when a GPU request was
withdrawn)."""

from __future__ import annotations

import asyncio

from kubespawner import KubeSpawner

from jupyterhub_gpu_reclaim.spawner.core import GPUReclaimSpawner


async def test_a_cancelled_read_of_the_progress_stream_is_cancelled_whenever_it_happens(monkeypatch):
    # KubeSpawner's own stream ends when the spawn does: at the moment the hub cancels the read
    cancelled_while_pending = 0
    for ticks in range(12):  # cancel the read 0..11 loop iterations after KubeSpawner's ended
        ended = asyncio.Event()

        async def kubespawner_progress(self, ended=ended):
            await ended.wait()
            return
            yield  # an async generator, as KubeSpawner's is

        monkeypatch.setattr(KubeSpawner, "progress", kubespawner_progress)
        spawner = GPUReclaimSpawner.__new__(GPUReclaimSpawner)  # no hub or cluster needed
        stream = spawner.progress()
        read = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.05)  # the stream now waits for KubeSpawner's next event
        ended.set()
        for _ in range(ticks):
            await asyncio.sleep(0)
        pending = read.cancel()  # False once the stream has ended by itself: the hub reads that end
        outcome = (await asyncio.gather(read, return_exceptions=True))[0]
        expected = asyncio.CancelledError if pending else StopAsyncIteration
        assert isinstance(outcome, expected), (ticks, repr(outcome))
        cancelled_while_pending += pending
        await stream.aclose()
    assert cancelled_while_pending >= 2  # the race itself was exercised, not only the clean ends
