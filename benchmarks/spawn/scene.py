"""What benchmarks/spawn_latency.py sets up and aims for: the scenario, the namespace and
image, the two arms, and the target."""

from __future__ import annotations

from gpu_reclaim_sim.paths import SCENARIOS

SCENARIO = SCENARIOS / "autoscaling.yaml"
# the real Kubernetes control plane (issue 37): the real kube-scheduler places the pods, the
# node agent runs them, its cluster autoscaler adds nodes, z2jh's placeholder StatefulSet
SIM_START_S = 180.0  # the control plane's start on a loaded 2-core machine
NAMESPACE = "jhub"
IMAGE = "quay.io/jupyter/datascience-notebook:2025-06-02"
ARMS = ("baseline", "image_locality")
PULL_WAIT_S = 1.0  # CACHED_PULL_SECONDS in spawner/timings.py: shorter is a manifest check
TARGET_P95_S = 20.0
