"""The time format the Kubernetes API uses, `metav1.Time`: the product's timestamps
(`jupyterhub_gpu_reclaim.timestamps`, which the simulator's modules also read and take the
clock from) to the second."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.timestamps import format_time, utcnow


def rfc3339(t: dt.datetime | None = None) -> str:
    """`metav1.Time`: RFC 3339 in UTC with second precision."""
    return format_time((t or utcnow()).replace(microsecond=0))

