"""The parts of benchmarks/service_cycle.py (the script keeps its options, the driver and the
tool processes' entry): the fake hub's users and pods (scene), the fakes process (fakes),
the counters and times read back (measure), our cycle (ours), idle-culler's (culler), and
the table and verdict (report)."""
