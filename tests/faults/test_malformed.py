"""Malformed answers, 200 OK, from every source: a user's server (`/api/kernels`,
`/api/terminals`), the hub's user listing, Prometheus, dcgm-exporter and the Kubernetes API
(pods in the list and in the watch). Wrong types, absurd dates, NaN and infinities, huge
numbers, missing keys, deep nesting, text that is not JSON, bodies over the size limit.

The real signal classes read real HTTP fakes (tests/support/fakes.py), wired into a Reclaimer as in
test_faults.py. In every test, bystanders are warned and reclaimed on schedule in the very
cycles they would be without the fault, each concerned session is held with the reason,
`cycles_total` says what each cycle was, and the last-successful-cycle time moves only
with the cycles that succeeded."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import sqlite3

import pytest

from jupyterhub_gpu_reclaim.service import cycle as service
from jupyterhub_gpu_reclaim.policy.config import PolicyConfig
from jupyterhub_gpu_reclaim.signals.base import MAX_BODY
from jupyterhub_gpu_reclaim.signals.dcgm import DcgmScrapeSignal
from jupyterhub_gpu_reclaim.signals.pods import PodSignal

from ..support.clock import START, at
from ..support.fakes import FakeDcgmExporter, FakeKubeAPI, iso
from ..support.fault_world import NS, P, World

# never-used GPUs warned at 10 min, reclaimed at 20; servers without GPUs culled at 20
POLICY = PolicyConfig(never_used_warn_after=dt.timedelta(minutes=10),
                      never_used_reclaim_after=dt.timedelta(minutes=20),
                      warning_lead=dt.timedelta(minutes=5), cpu_timeout=dt.timedelta(minutes=20))
ABSURD = "9999-12-31T23:59:59-23:59"  # the issue's: OverflowError once converted to UTC
DEEP = b"[" * 100_000 + b"]" * 100_000  # RecursionError in json
HUGE_INT = "9" * 400


class Hostile(World):
    """World with the policy above, bystanders bob (GPU) and carol (no GPU), the GPU data
    from Prometheus or from two dcgm-exporters (`gpu="dcgm"`: node-a and node-b), and the
    pods from the fake in-process source or from the Kubernetes API (`kube=True`: the real
    PodSignal, list and watch)."""

    def __init__(self, tmp_path, gpu: str = "prometheus", kube: bool = False) -> None:
        super().__init__(tmp_path)
        self.tmp_path = tmp_path
        self.policy = POLICY
        self.exporters = {n: FakeDcgmExporter(n) for n in ("node-a", "node-b")} if gpu == "dcgm" else {}
        self.kube = FakeKubeAPI() if kube else None
        self.stamps: list[float] = []

    async def start(self) -> "Hostile":
        for fake in [*self.exporters.values(), *([self.kube] if self.kube else [])]:
            await fake.start()
        if self.kube:
            import kubernetes_asyncio.watch  # noqa: F401  (its first import takes seconds: not in a cycle)
            path = self.tmp_path / "kubeconfig"
            path.write_text(self.kube.kubeconfig())
            self.pods = PodSignal(NS, str(path), watch_timeout=5)  # type: ignore[assignment]
        await super().start()
        self.bob = self.add("bob")
        self.carol = self.add("carol", gpus=0, last_activity=START)
        return self

    def new_reclaimer(self, stop_timeout: float = 0.3):
        reclaimer = super().new_reclaimer(stop_timeout)
        # time enough to read (and refuse) the huge answers on a busy machine
        self.hub_signal.timeout = self.prom_signal.timeout = self.kernel_signal.timeout = 20
        if self.exporters:
            reclaimer.gpu = DcgmScrapeSignal([e.url + "/metrics" for e in self.exporters.values()], timeout=20)
            self.parts.append(reclaimer.gpu)
        self.stamps = [self.metric(P + "last_successful_cycle_timestamp_seconds")]
        return reclaimer

    async def close(self) -> None:
        await super().close()
        if self.kube:
            await self.pods.stop()  # type: ignore[attr-defined]
        for fake in [*self.exporters.values(), *([self.kube] if self.kube else [])]:
            await fake.close()

    def add(self, user: str, *, gpus: int = 1, util: float | None = 0.0, last_activity=None,
            node: str = "node-b") -> str:
        sid = super().add(user, gpus=gpus, util=util, last_activity=last_activity)
        if self.exporters and gpus and util is not None:
            self.exporters[node].util[(NS, f"jupyter-{user}")] = util
        if self.kube:
            self.pods.pods.pop(sid, None)  # type: ignore[attr-defined]  (World.add filled FakePods')
            self.kube.pods[f"jupyter-{user}"] = self.pod(user, gpus)
        return sid

    def pod(self, user: str, gpus: int = 1) -> dict:
        """The pod KubeSpawner makes for `user`, as the API serves it."""
        port = int(self.servers.url.rsplit(":", 1)[1])
        keys = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"jupyter-{user}", "namespace": NS, "creationTimestamp": iso(START),
                         "resourceVersion": "1", "uid": f"uid-{user}", "annotations": dict(keys),
                         "labels": {"component": "singleuser-server", "app": "jupyterhub", **keys}},
            "spec": {"nodeName": "gpu-node-1", "containers": [{
                "name": "notebook", "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02",
                "ports": [{"name": "notebook-port", "containerPort": port, "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1",
                       "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "notebook", "ready": True, "restartCount": 0}]}}

    async def cycle(self):
        report = await super().cycle()
        self.stamps.append(self.metric(P + "last_successful_cycle_timestamp_seconds"))
        return report

    async def until(self, check, what: str) -> None:
        """Wait for the background watch to have applied a change (not a timing assertion:
        the deadline only keeps a broken test from hanging)."""
        for _ in range(3000):  # the watch's re-lists back off: 0.5 s, 1 s, 2 s, ...
            if check():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"never happened: {what}")

    # ---------------------------------------------------------------- what every test checks

    def assert_bystanders_on_schedule(self) -> None:
        assert self.warned(self.bob) == [at(10)] and self.stopped(self.bob) == [at(20)]
        assert self.stopped(self.carol) == [at(20)] and self.warned(self.carol) == []

    def assert_held(self, sid: str, rule: str, problem: str, since: dt.datetime = START,
                    warned: list | tuple = ()) -> None:
        """Held under `rule` in every cycle from `since` on, with `problem` in the decision's
        evidence; warned only as given; never stopped."""
        decisions = [r.decisions[sid] for r in self.reports if r.t >= since]
        assert decisions and {(d.action, d.rule) for d in decisions} == {("hold", rule)}, (sid, decisions[-1])
        assert all(problem in d.evidence["problem"] for d in decisions), (sid, decisions[-1].evidence)
        if rule in ("hub-data-invalid", "pod-data-invalid", "session-error"):  # the reason says it too
            assert problem in decisions[-1].reason
        assert self.warned(sid) == list(warned) and self.stopped(sid) == [], sid
        shown = self.reclaimer.status.sessions[sid]  # what the admin page shows
        assert shown.action == "hold" and shown.rule == rule and problem in shown.evidence["problem"]

    def assert_cycle_metrics_truthful(self) -> None:
        results = ["error" if r.error else f"skipped-{r.skipped}" if r.skipped else
                   f"degraded-{r.degraded}" if r.degraded else "ok" for r in self.reports]
        for result in set(results):
            assert self.metric(P + "cycles_total", result=result) == results.count(result), result
        assert self.metric(P + "cycle_interval_seconds") == 300
        for result, before, after in zip(results, self.stamps, self.stamps[1:], strict=False):
            assert after > before if result == "ok" else after == before, (result, before, after)


@pytest.fixture
async def make(tmp_path):
    made = []

    async def make(**kwargs) -> Hostile:
        made.append(await Hostile(tmp_path, **kwargs).start())
        return made[-1]

    yield make
    for w in made:
        await w.close()


def assert_all_ok(w: Hostile) -> None:
    assert all(r.error is None and r.skipped is None for r in w.reports)
    assert w.metric(P + "cycles_total", result="ok") == len(w.reports)
    w.assert_cycle_metrics_truthful()


# ---------------------------------------------------------------------------- user servers


def kernels(**fields) -> bytes:
    return json.dumps([{"id": "k1", "name": "python3", "execution_state": "idle",
                        "last_activity": iso(START), "connections": 0, **fields}]).encode()


KERNEL_ANSWERS = {  # victim: (endpoint, body, what the hold's evidence says)
    "absurd": ("kernels", kernels(last_activity=ABSURD), "out of range once in UTC"),
    "year1": ("kernels", kernels(last_activity="0001-01-01T00:00:00+01:00"), "out of range once in UTC"),
    "year9999": ("kernels", kernels(last_activity="9999-12-31T23:59:59Z"), "out of range (1970-2999)"),
    "number-date": ("kernels", kernels(last_activity=1767600000), "last_activity: int"),
    "nan-date": ("kernels", b'[{"execution_state": "idle", "last_activity": NaN}]', "last_activity: float"),
    "inf-date": ("kernels", b'[{"execution_state": "idle", "last_activity": 1e400}]', "last_activity: float"),
    "huge-int": ("kernels", f'[{{"execution_state": "idle", "last_activity": {HUGE_INT}}}]'.encode(), "int"),
    "list-state": ("kernels", kernels(execution_state=["busy"]), "execution_state: list"),
    "no-state": ("kernels", b'[{"id": "k1", "last_activity": "2026-11-02T08:00:00Z"}]', "no execution_state"),
    "string-kernel": ("kernels", b'["busy"]', "not an object"),
    "not-a-list": ("kernels", b'{"kernels": []}', "not a list"),
    "deep": ("kernels", DEEP, "RecursionError"),
    "not-json": ("kernels", b"<html>Jupyter Server</html>", "not JSON"),
    "huge-body": ("kernels", kernels() + b" " * MAX_BODY["kernels"], "larger than 1048576 bytes"),
    "terminal-date": ("terminals", json.dumps([{"name": "1", "last_activity": ABSURD}]).encode(), "/api/terminals"),
    "terminal-deep": ("terminals", DEEP, "RecursionError"),
}


async def test_malformed_kernel_answers_hold_only_their_session(make, caplog):
    caplog.set_level(logging.INFO)
    w = await make()
    victims = {}
    for name, (endpoint, body, problem) in KERNEL_ANSWERS.items():
        sid = w.add(f"k-{name}")
        w.servers.raw[f"k-{name}/{endpoint}"] = body
        victims[sid] = problem
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    for sid, problem in victims.items():
        # warnings still go out; the reclaim waits for kernels the server reports properly
        w.assert_held(sid, "kernel-data-missing", problem, since=at(20), warned=[at(10)])
    assert_all_ok(w)
    assert w.metric(P + "signal_errors_total", source="kernels") == len(victims) * len(w.reports)
    assert "Traceback" not in caplog.text and "9" * 50 not in caplog.text  # brief, bounded reasons


# ---------------------------------------------------------------------------- the hub API


HUB_MODELS = {  # victim: (change to the server model or, with "user.", the user model; evidence)
    "absurd": ({"last_activity": ABSURD}, "last_activity: timestamp out of range once in UTC"),
    "year1-started": ({"started": "0001-01-01T00:00:00+01:00"}, "started: timestamp out of range"),
    "number-date": ({"last_activity": 1767600000}, "last_activity: int"),
    "nan-date": ({"last_activity": float("nan")}, "last_activity: float"),
    "inf-date": ({"started": float("inf")}, "started: float"),
    "huge-int": ({"started": int(HUGE_INT)}, "started: int"),
    "options": ({"user_options": "gpu-1"}, "user_options: str"),
    "profile": ({"user_options": {"profile": [[["gpu-1"]]]}}, "profile: list"),
    "ready-string": ({"ready": "yes"}, "ready: str"),
    "no-ready": ({"ready": None}, "ready: missing"),
    "url": ({"url": 5}, "url: int"),
    "user-created": ({"user.created": ABSURD}, "created: timestamp out of range"),
    "user-groups": ({"user.groups": [1]}, "groups: not a list of strings"),
    "user-admin": ({"user.admin": "no"}, "admin: str"),
    "not-an-object": (None, "not an object"),  # the server model is a string
}


async def test_malformed_hub_models_hold_only_their_server(make, caplog):
    caplog.set_level(logging.INFO)
    w = await make()
    victims = {}
    for name, (change, problem) in HUB_MODELS.items():
        user = f"h-{name}"
        sid = w.add(user)
        model = w.hub.users[user]
        if change is None:
            model["servers"][""] = "running"
        for key, value in (change or {}).items():
            if key.startswith("user."):
                model[key[5:]] = value
            else:
                model["servers"][""][key] = value
        victims[sid] = problem
    # a user model that names nobody is left out; one whose servers are not an object too
    w.hub.users["ghost"] = {"kind": "user", "servers": {"": {"ready": True}}}
    w.hub.users["h-servers"] = {"kind": "user", "name": "h-servers", "servers": ["x"]}
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    for sid, problem in victims.items():
        w.assert_held(sid, "hub-data-invalid", problem)
    assert_all_ok(w)
    assert w.metric(P + "signal_errors_total", source="hub") == len(victims) * len(w.reports)
    assert w.metric(P + "holds", reason="hub-data-invalid") == len(victims)
    assert "a user model without a name" in caplog.text and "servers is not an object" in caplog.text


def listing(items) -> bytes:
    return json.dumps({"items": items, "_pagination": {"offset": 0, "limit": 200, "total": 1, "next": None}}).encode()


@pytest.mark.parametrize("body,problem", [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (DEEP, "RecursionError"),
    (listing([]) + b" " * MAX_BODY["hub"], "larger than"),
    (b'{"items": {"alice": {}}, "_pagination": {"next": null}}', "not a user list"),
    (b'{"items": []}', "not a user list"),
], ids=["not-json", "deep", "huge-body", "items-not-a-list", "no-pagination"])
async def test_unusable_hub_listing_skips_the_cycle_and_is_not_a_success(make, body, problem):
    w = await make()
    await w.run_until(at(5))
    w.hub.raw_listing = body
    await w.run_until(at(15))
    assert [r.skipped for r in w.reports] == [None, None, "hub", "hub"]
    assert problem in w.reports[-1].errors["hub"]
    w.assert_cycle_metrics_truthful()  # the skipped cycles left the last-successful time alone
    assert w.metric(P + "cycles_total", result="skipped-hub") == 2
    assert w.stamps[-1] == w.stamps[2] < w.metric(P + "last_cycle_timestamp_seconds")
    w.hub.raw_listing = None
    await w.run_until(at(40))
    # bob's data on both sides of the 15 min without observations (GPU idle, no kernel
    # activity) proves him idle across them: his clock ran on, and the warning due at 10
    # goes out at the first cycle back, the reclaim `warning_lead` after it
    assert w.warned(w.bob) == [at(20)] and w.stopped(w.bob) == [at(25)]
    assert w.stopped(w.carol) == [at(20)]  # idle-culler's rule: the hub's last_activity
    w.assert_cycle_metrics_truthful()


# ---------------------------------------------------------------------------- Prometheus


def series(user: str, value, ts="now", **labels) -> dict:
    item = {"metric": {"namespace": NS, "pod": f"jupyter-{user}", "gpu": "0", "field": "util", **labels}}
    item["value"] = [START.timestamp() if ts == "now" else ts, value] if value is not ... else None
    return item


PROMETHEUS_SERIES = {  # victim: its series (START's timestamp is rewritten to each cycle's)
    "inf": lambda u: series(u, "+Inf"),
    "minus-inf": lambda u: series(u, "-Inf"),
    "1e308": lambda u: series(u, "1e308"),
    "negative": lambda u: series(u, "-5"),
    "not-a-number": lambda u: series(u, "idle"),
    "nan": lambda u: series(u, "NaN"),
    "huge-int": lambda u: series(u, int(HUGE_INT)),
    "json-inf": lambda u: series(u, float("inf")),
    "list": lambda u: series(u, ["0"]),
    "no-value": lambda u: series(u, ...),
    "time-string": lambda u: series(u, "0", ts="now!"),
    "time-1e308": lambda u: series(u, "0", ts=1e308),
    "time-nan": lambda u: series(u, "0", ts=float("nan")),
    "label-number": lambda u: series(u, "0", gpu=0),
    "string": lambda u: "jupyter-" + u,
    "deep-labels": lambda u: {"metric": [[[[[u]]]]], "value": [0, "0"]},
}


async def test_malformed_prometheus_series_hold_only_their_gpu_session(make, caplog):
    caplog.set_level(logging.INFO)
    w = await make()
    victims = []
    for name, make_series in PROMETHEUS_SERIES.items():
        sid = w.add(f"p-{name}")
        w.prom.series[(NS, f"jupyter-p-{name}")] = make_series(f"p-{name}")
        victims.append(sid)

    def each(t):  # the good series carry each cycle's time, as Prometheus' do
        for item in w.prom.series.values():
            if isinstance(item, dict) and isinstance(item.get("value"), list) and item["value"][0] != "now!":
                if isinstance(item["value"][0], float) and START.timestamp() <= item["value"][0] < t.timestamp():
                    item["value"][0] = t.timestamp()

    await w.run_until(at(25), each)
    w.assert_bystanders_on_schedule()
    for sid in victims:
        w.assert_held(sid, "gpu-data-missing", "")
    assert {r.decisions[victims[0]].evidence["problem"] for r in w.reports} == {"no data for some GPUs"}
    assert_all_ok(w)
    assert w.metric(P + "holds", reason="gpu-data-missing") == len(victims)
    assert "Prometheus: a series whose labels cannot be read" in caplog.text
    assert "DCGM_FI_DEV_GPU_UTIL: inf is outside 0..100" in caplog.text


@pytest.mark.parametrize("body,problem", [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (DEEP, "RecursionError"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": []}}' + b" " * MAX_BODY["prometheus"],
     "larger than"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": {"0": 1}}}', "malformed query answer"),
    (b'{"status": "success", "data": 5}', "malformed query answer"),
    (b'[1, 2, 3]', "malformed query answer"),
], ids=["not-json", "deep", "huge-body", "result-not-a-list", "data-not-an-object", "a-list"])
async def test_unusable_prometheus_answer_holds_gpu_sessions_only(make, body, problem):
    w = await make()
    w.prom.raw = body
    await w.run_until(at(20))
    # GPU data missing: every GPU session held, the server without GPUs culled on time
    assert {(d.action, d.rule) for r in w.reports for d in [r.decisions[w.bob]]} == {("hold", "gpu-data-missing")}
    assert w.stopped(w.carol) == [at(20)]
    assert all(problem in r.errors["prometheus"] for r in w.reports)
    assert w.metric(P + "signal_errors_total", source="prometheus") == len(w.reports)
    assert_all_ok(w)  # a GPU source that fails is not a failed cycle: nothing is reclaimed on it


# ---------------------------------------------------------------------------- dcgm-exporter

# each pod its own GPU: one device under two pods would be a shared (time-sliced) one
LABELS = 'gpu="0",UUID="GPU-{0}",Hostname="node-a",container="notebook",namespace="jhub",pod="jupyter-{0}"'
DCGM_LINES = {  # victim: its lines in node-a's text
    "not-a-number": "DCGM_FI_DEV_GPU_UTIL{%s} idle",
    "inf": "DCGM_FI_DEV_GPU_UTIL{%s} +Inf",
    "1e308": "DCGM_FI_DEV_GPU_UTIL{%s} 1e308",
    "negative": "DCGM_FI_DEV_GPU_UTIL{%s} -1",
    "nan": "DCGM_FI_DEV_GPU_UTIL{%s} NaN",
    "engine-over-1": "DCGM_FI_PROF_GR_ENGINE_ACTIVE{%s} 7",
    "huge-time": "DCGM_FI_DEV_GPU_UTIL{%s} 0 99999999999999999999999999",
    "broken-labels": 'DCGM_FI_DEV_GPU_UTIL{%s,pod="x} 0',
    "no-value": "DCGM_FI_DEV_GPU_UTIL{%s}",
}


async def test_malformed_dcgm_lines_hold_only_their_gpu_session(make, caplog):
    caplog.set_level(logging.INFO)
    w = await make(gpu="dcgm")
    victims = []
    for name, line in DCGM_LINES.items():
        sid = w.add(f"d-{name}", node="node-a")
        w.exporters["node-a"].lines[(NS, f"jupyter-d-{name}")] = [line % LABELS.format(f"d-{name}")]
        victims.append(sid)
    ok = w.add("dora", node="node-a")  # a good line in the same text
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    assert w.warned(ok) == [at(10)] and w.stopped(ok) == [at(20)]
    for sid in victims:
        w.assert_held(sid, "gpu-data-missing", "")
    assert_all_ok(w)
    assert w.metric(P + "signal_errors_total", source="dcgm") is None  # both exporters answered
    assert "dcgm-exporter: a malformed line, ignored" in caplog.text


@pytest.mark.parametrize("body,problem", [
    (b"<html>404 page not found</html>", "no DCGM_FI_DEV_GPU_UTIL"),
    (b"DCGM_FI_DEV_GPU_UTIL 0\n" * 10 + b"#" * MAX_BODY["dcgm"], "larger than"),
    (b"[" * 100_000, "no DCGM_FI_DEV_GPU_UTIL"),
], ids=["not-metrics", "huge-body", "deep"])
async def test_unusable_dcgm_text_holds_only_that_nodes_sessions(make, body, problem, caplog):
    w = await make(gpu="dcgm")
    on_a = w.add("dora", node="node-a")
    w.exporters["node-a"].raw = body
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()  # bob's GPU is on node-b
    assert {(r.decisions[on_a].action, r.decisions[on_a].rule) for r in w.reports} == {("hold", "gpu-data-missing")}
    assert problem in caplog.text
    assert_all_ok(w)


# ---------------------------------------------------------------------------- the Kubernetes API


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


POD_CHANGES = {  # victim: (change to its pod: path → value, the hold's rule, evidence)
    "absurd-created": ({"metadata.creationTimestamp": ABSURD}, "pod-data-invalid", "out of range once in UTC"),
    "containers": ({"spec.containers": "notebook"}, "pod-data-invalid", "containers: str"),
    "gpus-1e400": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": "1e400"}}, "pod-data-invalid",
                   "is not a GPU count"),
    "gpus-huge-int": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": int(HUGE_INT)}},
                      "pod-data-invalid", "is not a GPU count"),
    "gpus-negative": ({"spec.containers.0.resources.limits": {"nvidia.com/gpu": -1}}, "pod-data-invalid",
                      "is not a GPU count"),
    "port": ({"spec.containers.0.ports.0.containerPort": "8888"}, "pod-data-invalid", "containerPort: str"),
    "pod-ip": ({"status.podIP": "evil.example.com/steal?"}, "pod-data-invalid", "does not appear to be an IP"),
    "status": ({"status": ["Running"]}, "pod-data-invalid", "status: list"),
    "conditions": ({"status.conditions": ["Ready"]}, "pod-data-invalid", "conditions: an item is not an object"),
    "ready": ({"status.containerStatuses.0.ready": "yes"}, "pod-data-invalid", "ready: str"),
    "deep": ({"spec.containers.0.resources": nested(500)}, "pod-data-invalid", "resources: list"),
    "no-name": ({"metadata.name": None}, "pod-missing", None),
    "user-number": ({"metadata.annotations.hub.jupyter.org/username": 5}, "pod-missing", None),
}


def change(pod: dict, path: str, value) -> None:
    keys = path.split(".")
    if keys[:2] == ["metadata", "annotations"]:  # the annotation's key holds dots
        keys = keys[:2] + [".".join(keys[2:])]
    target = pod
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(keys[-1]) if isinstance(target, list) else keys[-1]] = value


@pytest.mark.parametrize("via", ["list", "watch"])
async def test_malformed_pods_hold_only_their_session(make, caplog, via):
    caplog.set_level(logging.INFO)
    w = await make(kube=True)
    victims = {}
    for name, (changes, rule, problem) in POD_CHANGES.items():
        sid = w.add(f"k8s-{name}")
        victims[sid] = (f"jupyter-k8s-{name}", changes, rule, problem)
    held_since = START

    async def spoil():
        for pod_name, changes, _, _ in victims.values():
            pod = json.loads(json.dumps(w.kube.pods[pod_name]))
            for path, value in changes.items():
                change(pod, path, value)
            if via == "list":
                w.kube.pods[pod_name] = pod
            else:
                await w.kube.put(pod_name, pod)

    if via == "list":
        await spoil()
    else:
        await w.run_until(at(5))
        assert all(w.reports[-1].decisions[sid].action == "keep" for sid in victims)
        await spoil()
        held_since = at(10)
        untold = ("jupyter-k8s-no-name", "jupyter-k8s-user-number")  # the watch re-lists: gone
        await w.until(lambda: all(p.invalid for p in w.pods.pods.values() if p.name.startswith("jupyter-k8s-"))
                      and not set(untold) & set(w.pods.pods), "the watch delivered the spoilt pods")
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    for sid, (_, _, rule, problem) in victims.items():
        if problem is None:  # a pod that cannot be told apart: the server's pod is missing
            assert {(r.decisions[sid].action, r.decisions[sid].rule) for r in w.reports
                    if r.t >= held_since} == {("hold", "pod-missing")}
            assert w.stopped(sid) == []
        else:
            w.assert_held(sid, rule, problem, since=held_since)
    assert_all_ok(w)
    assert w.metric(P + "holds", reason="pod-data-invalid") == 11
    assert "ignoring a pod that cannot be told apart" in caplog.text


async def test_malformed_watch_events_relist_and_hold_nobody_else(make, caplog):
    """Lines of the watch that are no event: ignored, or the watch drops and the pods are
    listed again; either way the view stays current and nobody else is held."""
    caplog.set_level(logging.INFO)
    w = await make(kube=True)
    await w.run_until(at(5))
    lines = [b"<html>", DEEP, b'{"type": "MODIFIED", "object": "a pod"}', b'{"type": 5, "object": {}}',
             b"{" + b" " * (5 * 1024 * 1024) + b"}"]  # over kubernetes-asyncio's 4 MiB line
    for i, line in enumerate(lines):
        await w.kube.send_line(line)
        await w.kube.put(f"marker-{i}", {**w.pod(f"marker-{i}"), "metadata": {"name": f"marker-{i}"}})
        await w.until(lambda i=i: f"marker-{i}" in w.pods.pods, f"the view current after {line[:20]!r}")
        await w.cycle()
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    assert_all_ok(w)
    assert w.pods.relists == 1 + 4  # all but the line that is not JSON (kubernetes-asyncio skips it)
    dropped = [r.getMessage() for r in caplog.records if "pod watch dropped" in r.getMessage()]
    assert any("LineTooLong" in m for m in dropped), dropped


@pytest.mark.parametrize("body,problem", [
    (b"<html>", "JSONDecodeError"),
    (DEEP, "RecursionError"),
    (b'{"kind": "PodList", "items": []}' + b" " * MAX_BODY["pods"], "larger than"),
    (b'{"kind": "PodList", "items": {"a": 1}}', "items: dict"),
], ids=["not-json", "deep", "huge-body", "items-not-a-list"])
async def test_unusable_pod_list_holds_whom_it_cannot_see_and_is_not_a_success(make, body, problem):
    w = await make(kube=True)
    w.kube.raw_list = body
    await w.run_until(at(5))
    # no pod list read yet: nobody can be told from a GPU session
    assert [r.degraded for r in w.reports] == ["pods", "pods"]
    assert problem in w.reports[-1].errors["pods"]
    assert {(d.action, d.rule) for r in w.reports for d in r.decisions.values()} == {("hold", "pods-unavailable")}
    w.kube.raw_list = None
    await w.run_until(at(30))
    assert [r.degraded for r in w.reports[2:]] == [None] * 5
    assert w.warned(w.bob) == [at(10)] and w.stopped(w.bob) == [at(20)]
    w.assert_cycle_metrics_truthful()


# ---------------------------------------------------------------------------- the unexpected


async def test_unexpected_error_in_one_session_holds_it_logged_once(make, caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    w = await make()
    eve = w.add("eve")
    step = service.step

    def buggy(view, **kwargs):
        if view.session.user == "eve":
            raise ZeroDivisionError("a bug that only eve's data reaches")
        return step(view, **kwargs)

    monkeypatch.setattr(service, "step", buggy)
    await w.run_until(at(25))
    w.assert_bystanders_on_schedule()
    w.assert_held(eve, "session-error", "ZeroDivisionError: \"a bug that only eve's data reaches\"")
    assert_all_ok(w)
    assert w.metric(P + "session_errors_total") == len(w.reports)
    tracebacks = [r for r in caplog.records if r.exc_info and "session eve/ held" in r.getMessage()]
    assert len(tracebacks) == 1  # once, not every cycle


async def test_a_cycle_that_raises_is_an_error_and_not_a_success(make, caplog):
    """The store loses its warnings table (a botched migration, another process): the
    cycle raises. It is counted as an error, the last-successful time stays, the service
    goes on and recovers when the table is back."""
    caplog.set_level(logging.INFO)
    w = await make()
    await w.run_until(at(5))
    db = sqlite3.connect(w.store.engine.url.database)
    db.execute("ALTER TABLE warnings RENAME TO warnings_away")
    db.commit()
    await w.run_until(at(15))
    assert [r.error is not None for r in w.reports] == [False, False, True, True]
    assert "OperationalError" in w.reports[-1].error
    assert w.metric(P + "cycles_total", result="error") == 2
    assert w.stamps[-1] == w.stamps[2] < w.metric(P + "last_cycle_timestamp_seconds")
    assert "the cycle failed" in caplog.text
    db.execute("ALTER TABLE warnings_away RENAME TO warnings")
    db.commit()
    db.close()
    await w.run_until(at(40))
    assert w.warned(w.bob) == [at(20)] and w.stopped(w.bob) == [at(25)]  # as above
    w.assert_cycle_metrics_truthful()
