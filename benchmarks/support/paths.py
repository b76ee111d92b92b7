"""Where the checkout is: the benchmarks run from one, without an installed package."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
