"""The release tests' z2jh values on the simulated cluster (its users, admins and password;
the hub and user images from the worktree) and the PostgreSQL that stands in for the chart's."""

from __future__ import annotations

from pathlib import Path

from gpu_reclaim_sim.z2jh import release as z2jh

from . import live

PASSWORD = "release-password"
USERS, ADMINS = ["alice", "bob", "carol"], ["admin"]
POSTGRES_IMAGE = "docker.io/library/postgres:15"  # Debian's PostgreSQL 15 stands in for it
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


def sim_values(**options) -> dict:
    values = z2jh.sim_values(password=PASSWORD, users=USERS, admins=ADMINS, options=options)
    # the hub and user images with the package: the worktree's (an editable install's own
    # path lookup may not reach a pod)
    values["hub"]["extraEnv"] = {"PYTHONPATH": str(live.REPO)}
    values["singleuser"]["extraEnv"] = live.lab_paths()
    return values
