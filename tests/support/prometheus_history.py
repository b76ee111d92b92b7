"""History in a real Prometheus's TSDB: series written as OpenMetrics text (each family's series
together, each series' points in time order, times in seconds), turned into blocks by Debian's
`promtool tsdb create-blocks-from openmetrics`, and served by Debian's Prometheus started on
those blocks (retention long enough to keep any test's past)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from .prometheus import running_prometheus

PROMTOOL = Path("/usr/bin/promtool")
Points = Iterable[tuple[float, float]]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_family(out: IO[str], name: str, series: Iterable[tuple[Mapping[str, str], Points]],
                 kind: str = "gauge") -> None:
    """One metric family: its TYPE line, then each series' samples. Empty label values are
    left out, as Prometheus stores none."""
    out.write(f"# TYPE {name} {kind}\n")
    for labels, points in series:
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items() if v != "")
        prefix = f"{name}{{{text}}} "
        out.writelines(f"{prefix}{v:.6g} {t:.3f}\n" for t, v in points)


def end_file(out: IO[str]) -> None:
    out.write("# EOF\n")


def create_blocks(openmetrics: Path, data: Path, max_block_duration: str = "24h") -> None:
    """promtool's blocks of `openmetrics` in the TSDB folder `data`."""
    assert PROMTOOL.exists(), "promtool is missing: `make test` installs Prometheus (scripts/setup.sh)"
    data.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics",
                           f"--max-block-duration={max_block_duration}", str(openmetrics), str(data)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")


@contextlib.contextmanager
def history_prometheus(workdir: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """Prometheus serving the blocks in `workdir / "data"` (create_blocks), scraping nothing,
    with the extra command-line `args`."""
    config = {"global": {"scrape_interval": "1m", "evaluation_interval": "1m"}}
    with running_prometheus(config, workdir, ["--storage.tsdb.retention.time=10y", *args]) as url:
        yield url
