#!/usr/bin/env python
"""Benchmark: the real control plane's start-up and memory (issue 37).

Run it as `.venv/bin/python benchmarks/controlplane_startup.py [--repeat N]`. Each round starts
etcd, kube-apiserver, kube-scheduler and kube-controller-manager as a run of the simulator and
the tests start them (sim.controlplane.components.ControlPlane: the run's CA and certificates
made first, each component on loopback after the one before it is ready), waits for the
controller-manager's first ServiceAccount (its controllers at work), lets the informers settle
for 10 s, reads each component's memory and CPU time, and stops them by their PIDs. Prints the
median of the rounds as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_reclaim_sim.controlplane.components import ControlPlane, binaries  # noqa: E402

SETTLE_S = 10.0


def one_round(bin_dir: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        plane = ControlPlane(Path(tmp) / "run", bin_dir)
        try:
            plane.start()
            out = {"all_ready_s": time.monotonic() - started}
            out |= {f"{c.name}.ready_s": c.ready_s for c in plane.components}
            while plane.get("/api/v1/namespaces/default/serviceaccounts/default")[0] != 200:
                time.sleep(0.1)
            out["default_serviceaccount_s"] = time.monotonic() - started
            time.sleep(SETTLE_S)
            for c in plane.components:
                out |= {f"{c.name}.{k}": v for k, v in c.usage().items()}
            out["own_rss_mib"] = sum(out[f"{c.name}.anon_rss_mib"] for c in plane.components)
            return out
        finally:
            plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    bin_dir = binaries()
    rounds = [one_round(bin_dir) for _ in range(args.repeat)]
    median = {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
    print(json.dumps({"rounds": args.repeat, "load_average": os.getloadavg(), "median": median}, indent=1))


if __name__ == "__main__":
    main()
