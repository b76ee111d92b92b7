"""What the reclaim-cycle harnesses of tests/service (harness.py) and tests/faults
(fault_world.py) share: their cycle interval, namespace and metric prefix, running cycles on a
simulated clock and reading back, per session, what the cycles did and the metrics they left."""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu_reclaim.service.metrics import PREFIX

STEP = dt.timedelta(minutes=5)  # the harnesses' cycle interval
NS = "jhub"  # the namespace of the servers' pods
P = f"{PREFIX}_"  # the service's metrics, named as the tests read them: P + "cycles_total"


class CycleRecorder:
    """Mixed into a harness that has `reclaimer`, `reports` (a list), `now` (a one-item list
    the reclaimer's clock reads), `step` (the cycle interval) and `metrics` (the reclaimer's)."""

    reclaimer: Any
    metrics: Any
    reports: list
    now: list[dt.datetime]
    step: dt.timedelta

    async def cycle(self):
        report = await self.reclaimer.run_cycle()
        await self.reclaimer.drain()
        self.reports.append(report)
        self.now[0] += self.step
        return report

    async def run_until(self, t: dt.datetime, each: Callable[[dt.datetime], None] | None = None) -> None:
        """Cycles at now, now + step, ... up to and including t."""
        while self.now[0] <= t:
            if each is not None:
                each(self.now[0])
            await self.cycle()

    def warned(self, sid: str) -> list[dt.datetime]:
        return [r.t for r in self.reports if sid in r.warned]

    def stopped(self, sid: str) -> list[dt.datetime]:
        return [r.t for r in self.reports if sid in r.stops]

    def metric(self, name: str, **labels) -> float | None:
        """The value of a series in the /metrics text (generate_latest)."""
        text = generate_latest(self.metrics.registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return None
