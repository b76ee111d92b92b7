"""The service's settings of Python's cyclic garbage collector.

A cycle keeps what it observes and decides about every server until it ends (hundreds of
thousands of objects with 20,000 servers), and with the default thresholds (700, 10, 10) each
700 of them start a young collection and the survivors soon a full one, which walks every
object the process holds: at 20,000 servers half the cycle's CPU time went to some 7 full
collections a cycle (docs/benchmarks.md, "Reclaim cycle vs jupyterhub-idle-culler"). Few of
the cycle's objects are cyclic garbage: reference counting frees them when the cycle is over.
Collecting every 50,000 allocations instead leaves at most that many cyclic objects
uncollected for a while (a few MiB) and takes full collections out of the cycle.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 10)  # gc.set_threshold: young, middle and old generation


def set_thresholds() -> None:
    """Set the collector's thresholds for the service (once, at its start)."""
    gc.set_threshold(*THRESHOLDS)
