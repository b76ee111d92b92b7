"""The benchmarks (docs/benchmarks.md). Each script here runs as `.venv/bin/python
benchmarks/NAME.py`; the larger ones keep their parts in a package of their own (cycle/ for
service_cycle.py, spawn/ for spawn_latency.py), and what several
share is in support/."""
