"""GPU readings of what the real dcgm-exporter writes (exporter_fixtures/, each file naming its
version and mode), served over HTTP on loopback and scraped by Debian's Prometheus with the
target labels and relabelling of each way clusters scrape it: a ServiceMonitor with
`honorLabels` false and true (the target labels prometheus-operator's relabelling gives:
namespace, pod, container, service, endpoint), an annotation job labelling its target with
namespace and service but not pod (`honor_labels` false, as in the prometheus chart's and
Prometheus's own `kubernetes-service-endpoints` example), and examples/prometheus's own job.
The project's query goes to that Prometheus through PrometheusSignal; the same texts are
also read by a direct scrape (DcgmScrapeSignal). One Prometheus for the module."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from gpu_reclaim_sim.paths import REPO
from jupyterhub_gpu_reclaim.signals.dcgm import DcgmScrapeSignal
from jupyterhub_gpu_reclaim.signals.gpu_readings import NO_HOSTPID, GpuReading
from jupyterhub_gpu_reclaim.signals.prometheus import PrometheusSignal, default_query

from ..support.prometheus import running_prometheus, without_kubernetes_sd

pytestmark = pytest.mark.asyncio(loop_scope="module")

FIXTURES = Path(__file__).with_name("exporter_fixtures")
TEXTS = {p.stem: p.read_bytes() for p in sorted(FIXTURES.glob("*.prom"))}
EXPORTER_NS = "gpu-operator"


class _Exporters(BaseHTTPRequestHandler):
    """Each fixture at /<its name>/metrics, as the exporter serves it."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        name = self.path.removeprefix("/").removesuffix("/metrics")
        body = TEXTS.get(name)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def exporters():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporters)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _targets(address: str, labels) -> list[dict]:
    """One static target per fixture, its exporter pod labelled by `labels(i)`."""
    return [{"targets": [address], "labels": {"__metrics_path__": f"/{name}/metrics", **labels(i)}}
            for i, name in enumerate(TEXTS)]


def _service_monitor(i: int) -> dict:
    return {"namespace": EXPORTER_NS, "pod": f"nvidia-dcgm-exporter-{i}", "container": "nvidia-dcgm-exporter",
            "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}


def _annotation(i: int) -> dict:
    return {"namespace": EXPORTER_NS, "service": "nvidia-dcgm-exporter", "node": f"gpu-node-{i}"}


JOBS = {
    "servicemonitor-honorlabels-false": (False, _service_monitor),
    "servicemonitor-honorlabels-true": (True, _service_monitor),
    "annotations": (False, _annotation),
}
EXAMPLE_JOB = "dcgm-exporter"
# the pods Kubernetes service discovery would find: the GPU operator's exporter, the exporter
# chart's, and a pod that is neither (its port 9400 is not an exporter's)
DISCOVERED = {
    "4.5.3-4.8.2_default": {"__meta_kubernetes_pod_label_app": "nvidia-dcgm-exporter"},
    "4.5.3-4.8.2_virtual": {"__meta_kubernetes_pod_label_app_kubernetes_io_name": "dcgm-exporter"},
    "3.3.0-3.2.0_mig": {"__meta_kubernetes_pod_label_app": "something-else"},
}


def _example_job(address: str, workdir: Path) -> dict:
    """examples/prometheus/prometheus.yml's dcgm-exporter job, finding the pods of DISCOVERED
    as Kubernetes discovery labels them (without_kubernetes_sd); its own relabelling decides
    what is scraped."""
    config = yaml.safe_load((REPO / "examples" / "prometheus" / "prometheus.yml").read_text())
    targets = [{"targets": [address], "labels": {
        "__metrics_path__": f"/{name}/metrics", "__meta_kubernetes_namespace": EXPORTER_NS,
        "__meta_kubernetes_pod_name": f"exporter-{i}", "__meta_kubernetes_pod_node_name": f"node-{i}",
        "__meta_kubernetes_pod_container_port_number": "9400", **meta}}
        for i, (name, meta) in enumerate(DISCOVERED.items())]
    (workdir / "pods.json").write_text(json.dumps(targets))
    (job,) = [j for j in without_kubernetes_sd(config, workdir / "pods.json")["scrape_configs"]
              if j["job_name"] == EXAMPLE_JOB]
    return job


def _api(url: str, path: str) -> dict:
    with urllib.request.urlopen(url + path, timeout=5) as r:
        return json.load(r)["data"]


@pytest.fixture(scope="module")
def prometheus(exporters, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("prometheus")
    jobs = [{"job_name": name, "honor_labels": honor, "static_configs": _targets(exporters, labels)}
            for name, (honor, labels) in JOBS.items()]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [*jobs, _example_job(exporters, workdir)]}
    with running_prometheus(config, workdir) as url:
        expected = len(JOBS) * len(TEXTS) + sum(1 for m in DISCOVERED.values() if "something-else" not in m.values())
        deadline = time.monotonic() + 30
        while True:  # every target scraped once (the first scrape comes within one interval)
            active = _api(url, "/api/v1/targets")["activeTargets"]
            if sum(t["health"] == "up" for t in active) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        yield url


# what each pod's GPUs read, for every way of scraping: (gpus, util, fb_used_mib, shared, problem)
EXPECTED = {
    "jupyter-mig": (("0/7",), (pytest.approx(87.1234),), (3210.0,), False, None),  # finding 1
    "jupyter-alice": (("0",), (63.0,), (20480.0,), False, None),  # finding 2
    "jupyter-bob": (("1",), (0.0,), (512.0,), False, None),  # finding 2: idle, alone
    "jupyter-carol": (("0",), (None,), (None,), True, NO_HOSTPID),  # finding 3
    "jupyter-dave": (("0",), (None,), (None,), True, NO_HOSTPID),
    "jupyter-erin": (("1",), (None,), (None,), False, NO_HOSTPID),
    "jupyter-frank": (("0",), (42.0,), (8192.0,), False, None),
}


def _users(readings: dict[tuple[str, str], GpuReading]) -> dict[str, tuple]:
    """The readings of the users' pods (namespace jhub); the exporter's own pod, keyed by a
    free GPU's series, is in its namespace and never a user's."""
    assert all(ns in ("jhub", EXPORTER_NS) for ns, _ in readings), readings
    return {pod: (r.gpus, r.util, r.fb_used_mib, r.shared, r.problem)
            for (ns, pod), r in readings.items() if ns == "jhub"}


_read: dict[str, dict[str, tuple]] = {}


async def users_read(source: str, prometheus: str, exporters: str) -> dict[str, tuple]:
    """What the users' pods read through one job of the Prometheus (the project's query,
    restricted to that job), or by a direct scrape ("direct"); once per source."""
    if source not in _read:
        if source == "direct":
            signal: PrometheusSignal | DcgmScrapeSignal = DcgmScrapeSignal(
                [f"http://{exporters}/{name}/metrics" for name in TEXTS], timeout=5)
        else:
            signal = PrometheusSignal(prometheus, query=default_query(f'job="{source}"'), timeout=5)
        async with signal:
            _read[source] = _users(await signal.utilization())
    return _read[source]


SOURCES = [*JOBS, "direct"]


@pytest.mark.parametrize("source", SOURCES)
async def test_finding_1_a_busy_mig_instance_reads_its_engine_activity(prometheus, exporters, source):
    """3.3.0 writes GPU_UTIL 0 for every MIG instance (dcgm-exporter issue 216): the
    instance at 87 % engine activity reads 87 %, not 0 (the query's `or` kept GPU_UTIL)."""
    assert (await users_read(source, prometheus, exporters))["jupyter-mig"] == EXPECTED["jupyter-mig"]


@pytest.mark.parametrize("source", SOURCES)
async def test_finding_2_exclusive_gpus_stay_exclusive_with_virtual_gpus(prometheus, exporters, source):
    """KUBERNETES_VIRTUAL_GPUS (4.5.3-4.8.2) keeps a device-level series beside each pod's;
    with honorLabels true Prometheus labels it with the exporter's pod, which must not count
    as a second holder."""
    read = await users_read(source, prometheus, exporters)
    assert {p: read[p] for p in ("jupyter-alice", "jupyter-bob")} == {
        p: EXPECTED[p] for p in ("jupyter-alice", "jupyter-bob")}


@pytest.mark.parametrize("source", SOURCES)
async def test_finding_3_pods_all_zero_without_hostpid_are_missing_data(prometheus, exporters, source):
    """Without hostPID every pod's per-process GPU_UTIL is 0 on busy GPUs: no value (held,
    never idle), with the reason for the session's evidence."""
    read = await users_read(source, prometheus, exporters)
    for pod in ("jupyter-carol", "jupyter-dave", "jupyter-erin"):
        assert read[pod] == EXPECTED[pod], pod


async def test_finding_4_a_job_without_a_pod_label_reads_the_holder(prometheus, exporters):
    """The annotation job labels its target with namespace but not pod (honor_labels false):
    the exporter's namespace becomes exported_namespace, its pod stays pod."""
    assert set(await users_read("annotations", prometheus, exporters)) == set(EXPECTED)


@pytest.mark.parametrize("source", SOURCES)
async def test_every_pod_reads_as_the_exporter_wrote_it(prometheus, exporters, source):
    assert await users_read(source, prometheus, exporters) == EXPECTED


async def test_finding_5_examples_prometheus_scrapes_both_exporter_deployments(prometheus):
    """ examples/prometheus/prometheus.yml keeps the GPU operator's exporter
    (`app: nvidia-dcgm-exporter`) and the exporter chart's (`app.kubernetes.io/name`), not
    other pods; what it stores reads as the ServiceMonitor's does."""
    active = [t for t in _api(prometheus, "/api/v1/targets")["activeTargets"] if t["labels"]["job"] == EXAMPLE_JOB]
    assert sorted(t["labels"]["pod"] for t in active) == ["exporter-0", "exporter-1"]
    assert all(t["health"] == "up" for t in active), active
    async with PrometheusSignal(prometheus, query=default_query(f'job="{EXAMPLE_JOB}"'), timeout=5) as prom:
        readings = _users(await prom.utilization())
    assert readings == {pod: EXPECTED[pod] for pod in ("jupyter-alice", "jupyter-bob", "jupyter-frank")}


@pytest.mark.parametrize("job,codes", [
    ("servicemonitor-honorlabels-false", {"exported-labels"}),
    ("servicemonitor-honorlabels-true", set()),
    ("annotations", {"exported-labels", "namespace-renamed-alone"}),
])
async def test_the_self_check_says_what_the_exporter_writes(prometheus, job, codes, caplog):
    """The start-up self-check (item 6) on the first answer, once: the fields and labels
    found, MIG (and its GPU_UTIL ignored), virtual GPUs with per-process values, the
    device-level series (named with the exporter's pod under honorLabels true), the GPUs
    read without hostPID, and the renamed labels of each job."""
    caplog.set_level("INFO", logger="jupyterhub_gpu_reclaim.signals.gpu")
    async with PrometheusSignal(prometheus, query=default_query(f'job="{job}"'), timeout=5) as prom:
        await prom.utilization()
        await prom.utilization()
    findings = {f.code: f for f in prom.findings or []}
    always = {"fields", "labels", "mig", "mig-gpu-util", "virtual-gpus", "device-level-series", "no-hostpid"}
    assert set(findings) == always | codes
    assert "pod_uid" in findings["labels"].line  # (the query keeps only the labels it groups by)
    assert ("nvidia-dcgm-exporter-" in findings["device-level-series"].line) == job.endswith("true")
    assert all(pod in findings["no-hostpid"].line for pod in ("jhub/jupyter-carol", "jhub/jupyter-erin"))
    assert findings["no-hostpid"].warning and not findings["mig"].warning
    logged = [r.getMessage() for r in caplog.records if "self-check" in r.getMessage()]
    assert len(logged) == len(findings)  # once, at the first answer


async def test_the_self_check_of_a_direct_scrape_names_every_exporter_label(exporters):
    async with DcgmScrapeSignal([f"http://{exporters}/{name}/metrics" for name in TEXTS], timeout=5) as dcgm:
        await dcgm.utilization()
    findings = {f.code: f for f in dcgm.findings or []}
    assert set(findings) == {"fields", "labels", "mig", "mig-gpu-util", "virtual-gpus", "device-level-series",
                             "no-hostpid"}
    assert findings["labels"].line == ("exporter labels: gpu, UUID, pci_bus_id, device, modelName, Hostname, "
                                       "GPU_I_ID, GPU_I_PROFILE, pod, namespace, container, pod_uid, vgpu")
