"""What several benchmarks share: where the checkout is (paths), facts about processes and
the machine (process), and statistics (stats)."""
