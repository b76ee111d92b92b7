"""The parts of benchmarks/spawn_latency.py (the script keeps its options, the arms' child
processes and the report): what it sets up and aims for (scene), one arm in its child
process (arm), the server's start-up on the real stack (startup), and an arm summed up
(summary)."""
