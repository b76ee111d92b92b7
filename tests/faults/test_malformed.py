"""Malformed answers, 200 OK, from a user's server (`/api/kernels`, `/api/terminals`), the
hub's user listing, Prometheus and dcgm-exporter, and an unexpected error in a session or in
the cycle. Wrong types, absurd dates, NaN and infinities, huge numbers, missing keys, deep
nesting, text that is not JSON, bodies over the size limit. The Kubernetes API's:
test_malformed_pods.py.

The real signal classes read real HTTP fakes (tests/support/fakes.py), wired into a Reclaimer
as in test_faults.py (the `make` fixture: tests/faults/conftest.py). In every test,
bystanders are warned and reclaimed on schedule, each concerned session is held with the
reason, and the cycles' metrics tell the truth (tests/support/hostile_world.py)."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from jupyterhub_gpu_reclaim.service import cycle as service
from jupyterhub_gpu_reclaim.signals.http_source import MAX_BODY

from ..support.clock import START, at
from ..support.cycles import NS, P
from ..support.fakes import iso
from ..support.hostile_world import ABSURD, DEEP, HUGE_INT, assert_all_ok


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
    assert {r.decisions[victims[0]].measured.problem for r in w.reports} == {"no data for some GPUs"}
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
    tracebacks = [r for r in caplog.records if r.exc_info and "session eve held" in r.getMessage()]
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
