"""The time format the Kubernetes API uses, `metav1.Time`: the product's timestamps
(`jupyterhub_gpu_reclaim.timestamps`, which the simulator's modules also read and take the
clock from) to the second."""

from __future__ import annotations

import datetime as dt

from jupyterhub_gpu_reclaim.timestamps import format_time, utcnow


def rfc3339(t: dt.datetime | None = None) -> str:
    """`metav1.Time`: RFC 3339 in UTC with second precision."""
    return format_time((t or utcnow()).replace(microsecond=0))



def go_duration(seconds: float) -> str:
    """A duration as the kubelet prints it: Go's Duration.String, truncated to
    milliseconds (`750ms`, `5.01s`, `1m20s`, `5m0s`)."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs
