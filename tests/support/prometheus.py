"""Debian's Prometheus (/usr/bin/prometheus, installed by scripts/setup.sh), started by a test
with a given configuration, a TSDB in a temporary folder, on a free loopback port, and stopped
by its PID."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from gpu_reclaim_sim.launch import free_port

PROMETHEUS = Path("/usr/bin/prometheus")


@contextlib.contextmanager
def running_prometheus(config: dict, workdir: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """Prometheus running `config` (a prometheus.yml as a dict) in `workdir`, with the extra
    command-line `args`; yields its URL."""
    assert PROMETHEUS.exists(), "Prometheus is missing: `make test` installs it (scripts/setup.sh)"
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = workdir / "prometheus.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={workdir / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}", *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("Prometheus did not start:\n" + log_path.read_text()[-2000:])
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def without_kubernetes_sd(config: dict, targets: Path) -> dict:
    """`config` (a prometheus.yml as a dict) with each job's Kubernetes service discovery,
    which Debian's Prometheus is built without, replaced by the file `targets` (targets
    labelled as discovery labels them, `__meta_kubernetes_*`): the jobs' own relabelling
    then decides what is scraped, as it would on a cluster."""
    jobs = []
    for job in config.get("scrape_configs", []):
        job = dict(job)
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [str(targets)], "refresh_interval": "1s"}]
        jobs.append(job)
    return {**config, "scrape_configs": jobs}
