"""The time format the Kubernetes API uses, `metav1.Time`: the product's timestamps
(`jupyterhub_gpu_reclaim.timestamps`) to the second. The simulator's modules take it,
`parse` and the clock `now` from here."""

from __future__ import annotations

import datetime as dt

from ..timestamps import format_time
from ..timestamps import parse_time as parse  # noqa: F401
from ..timestamps import utcnow as now


def rfc3339(t: dt.datetime | None = None) -> str:
    """`metav1.Time`: RFC 3339 in UTC with second precision."""
    return format_time((t or now()).replace(microsecond=0))

