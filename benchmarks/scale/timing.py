"""How benchmarks/sim_scale.py times its requests, paces them, and samples the
simulator's memory."""

from __future__ import annotations

import asyncio
import time

from benchmarks.support.process import proc_status


class Recorder:
    """Latencies per operation (seconds), and failures."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {}
        self.started: dict[str, list[float]] = {}  # wall-clock start of each timed request
        self.errors: dict[str, list[str]] = {}

    def add(self, op: str, seconds: float, started: float) -> None:
        self.latency.setdefault(op, []).append(seconds)
        self.started.setdefault(op, []).append(started)

    def error(self, op: str, what: str) -> None:
        self.errors.setdefault(op, []).append(what)


async def timed(rec: Recorder, op: str, call, ok=(200, 201), wire: list[tuple[str, int]] | None = None
                ) -> bytes | None:
    """Run one API call with `_preload_content=False` and time it until the whole body
    has been read (and decompressed, where the server gzipped it: aiohttp decodes as it
    reads): the server's work plus loopback transfer, not the client's model
    deserialisation. `wire` gets the response's encoding and length on the wire."""
    wall = time.time()
    started = time.perf_counter()
    try:
        resp = await call()
        body = await resp.read()
    except Exception as e:  # noqa: BLE001 - a failure is a result here
        rec.error(op, f"{type(e).__name__}: {e}")
        return None
    elapsed = time.perf_counter() - started
    status = resp.status
    if wire is not None:
        wire.append((resp.headers.get("Content-Encoding", "identity"), int(resp.headers.get("Content-Length", -1))))
    resp.release()
    if status not in ok:
        rec.error(op, f"HTTP {status}: {body[:200]!r}")
        return None
    rec.add(op, elapsed, wall)
    return body


async def paced(n: int, rate: float, concurrency: int, make_call) -> float:
    """Start n calls at `rate` per second, at most `concurrency` in flight; return the
    seconds it took. A call is timed only once it holds a slot (see `timed`)."""
    sem = asyncio.Semaphore(concurrency)
    tasks: list[asyncio.Task] = []
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one(i: int) -> None:
        try:
            await make_call(i)
        finally:
            sem.release()

    for i in range(n):
        if rate > 0:
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await sem.acquire()
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return loop.time() - start


class Sampler:
    """Samples the simulator's RSS and CPU time in the background."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            st = proc_status(self.pid)
            if "VmRSS" in st:
                self.samples.append((time.time(), st["VmRSS"]))
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
