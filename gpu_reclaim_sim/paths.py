"""Where the simulator's files are. Its scenarios and the demo's configuration are package
data (an installed wheel runs `jupyterhub-gpu-reclaim-sim run` and `demo` with them); the
demo's z2jh release reads the clone: the admin's `helm-values/` and the third-party chart
beside it (`../shared`, never copied into the repository)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SCENARIOS = PACKAGE / "scenarios"
DEFAULT_SCENARIO = SCENARIOS / "cluster.yaml"  # the demo's cluster
DEMO_CONFIG = PACKAGE / "demo_config"  # the demo's hub, its reclaim service and its values
REPO = PACKAGE.parent
SHARED = REPO.parent / "shared"


def pod_log_path(data_dir: Path, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
    """Where a container's output goes in a run's `data_dir` (`kubectl logs` reads it);
    `previous`: that of its last run before a restart (`kubectl logs --previous`)."""
    return data_dir / "logs" / f"{namespace}_{pod}_{container}{'.previous' if previous else ''}.log"
