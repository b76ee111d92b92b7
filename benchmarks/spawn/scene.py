"""What benchmarks/spawn_latency.py sets up and aims for: the scenario, the namespace and
image, the two arms, and the target."""

from __future__ import annotations

from gpu_reclaim_sim.paths import SCENARIOS

SCENARIO = SCENARIOS / "autoscaling.yaml"
NAMESPACE = "jhub"
IMAGE = "quay.io/jupyter/datascience-notebook:2025-06-02"
ARMS = ("baseline", "image_locality")
PULL_WAIT_S = 1.0  # CACHED_PULL_SECONDS in spawner/timings.py: shorter is a manifest check
TARGET_P95_S = 20.0
