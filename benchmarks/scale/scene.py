"""What benchmarks/sim_scale.py sets up and aims for: the scenario, the pods' namespace,
labels and image, the GPU plan, and the targets."""

from __future__ import annotations

from gpu_reclaim_sim.paths import SCENARIOS

SCENARIO = SCENARIOS / "scale.yaml"
NAMESPACE = "jhub"
COMPONENT = "singleuser-server"
LABEL_SELECTOR = f"component={COMPONENT}"
IMAGE = "quay.io/jupyterhub/singleuser:latest"
SENT_AT = "benchmark.gpu-reclaim/sent-at"  # annotation: time.time() just before the create
GPU_CAPACITY = 10 * 8  # scale.yaml: 10 GPU nodes x 8 GPUs
# GPU pods by size (16 + 16 + 48 = 80 GPUs), largest first so that they pack without fragmentation
GPU_PLAN = [4] * 4 + [2] * 8 + [1] * 48
TARGET_P99_MS = 50.0
TARGET_RSS_MB = 500.0
KUBESPAWNER_DELETE_GRACE = 1  # KubeSpawner.delete_grace_period's default
