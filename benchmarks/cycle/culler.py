"""jupyterhub-idle-culler's cycle in benchmarks/service_cycle.py, on the same fake hub."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cycle.measure import diff, fake_counters, summary
from benchmarks.cycle.scene import CULL_TIMEOUT_S, TOKEN, Scene
from benchmarks.support.process import proc_status


async def run_culler(ports: dict[str, int], cycles: int, profile: str | None, pods_mode: str,
                     scene: Scene) -> dict[str, Any]:
    import logging

    from jupyterhub_idle_culler import cull_idle

    hub_base = f"http://127.0.0.1:{ports['hub']}"
    api = f"{hub_base}/hub/api"
    logger = logging.getLogger("JupyterHub")

    async def cycle() -> float:
        t0 = time.monotonic()
        await cull_idle(api, TOKEN, inactive_limit=CULL_TIMEOUT_S, logger=logger, cull_users=False,
                        remove_named_servers=False, max_age=0, concurrency=10, api_page_size=200)
        return time.monotonic() - t0

    c0 = time.process_time()
    first = await cycle()
    first_cpu = time.process_time() - c0
    before = fake_counters(hub_base)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile(time.process_time)
    times, cpu = [], []
    for _ in range(cycles):
        if prof:
            prof.enable()
        c0 = time.process_time()
        times.append(await cycle())
        cpu.append(time.process_time() - c0)
        if prof:
            prof.disable()
    after = fake_counters(hub_base)
    if prof:
        prof.dump_stats(profile)
    return {"tool": "jupyterhub-idle-culler 2.0", "first": first, "first_cpu": first_cpu,
            "cycles": summary(times), "times": times, "cpu": cpu,
            "fake_counts_per_cycle": {k: v / cycles for k, v in diff(after, before).items()},
            **proc_status()}
