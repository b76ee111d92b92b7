"""The GPU usage report (`jupyterhub-gpu-reclaim report`): GPU-hours held, used and idle per
user, group, profile and day, the GPU queue, and an estimate of what the default policy
would have freed, read from the cluster's own Prometheus history (docs/report.md).

A layer of its own above signals/ and policy/: promql (the queries), prometheus_range
(paginated range queries, bounded), history (the answers as per-GPU timelines, read by
signals.gpu_readings), usage (the figures), estimate (the policy's what-if on the history),
render (text, JSON, CSV) and run (the whole report from the command's arguments)."""
