"""The signals against canned text and a tiny aiohttp server on 127.0.0.1: parsing,
pagination, and every error path (HTTP 500, timeout, bad JSON) raising SignalError."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from aiohttp import web

from jupyterhub_gpu_reclaim.policy.observations import Kernel
from jupyterhub_gpu_reclaim.signals.http_source import SignalError
from jupyterhub_gpu_reclaim.signals.interfaces import GpuSource, HubSource, KernelSource
from jupyterhub_gpu_reclaim.signals.dcgm import DcgmScrapeSignal, parse_dcgm_text
from jupyterhub_gpu_reclaim.signals.hub import HubServer, HubSignal
from jupyterhub_gpu_reclaim.signals.kernels import KernelSignal

from ..support.hubapi import StaticProbeToken
from ..support.signal_inputs import Server, k8s_pod, series, vector

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = "secret-token-123"


@pytest.fixture
async def server():
    s = Server()
    yield s
    await s.stop()


def user(name, servers, **extra):
    return {"name": name, "admin": False, "groups": [], "last_activity": "2026-01-01T00:05:00.000000Z",
            "servers": servers, **extra}


def ready_server(url, **extra):
    return {"name": "", "last_activity": "2026-01-01T00:00:00.123456Z", "started": "2025-12-31T23:00:00Z",
            "pending": None, "ready": True, "stopped": False, "url": url, "user_options": {"profile": "gpu-1"},
            "progress_url": "", **extra}


USERS = [user("alice", {"": ready_server("/user/alice/")}, admin=True, groups=["staff"]),
         user("bob", {"": ready_server("/user/bob/"), "big": ready_server("/user/bob/big/", name="big")}),
         user("carol", {"": ready_server("/user/carol/")})]


def paginated_hub(server: Server, users=USERS, version="6.1.1"):
    async def root(request):
        server.requests.append(request)
        return web.json_response({"version": version})

    async def users_handler(request):
        server.requests.append(request)
        assert request.headers["Authorization"] == f"token {TOKEN}"
        if request.headers.get("Accept") != "application/jupyterhub-pagination+json":
            return web.json_response(users)
        offset = int(request.query.get("offset", 0))
        limit = int(request.query.get("limit", 50))
        items = users[offset:offset + limit]
        nxt = None
        if offset + limit < len(users):
            q = dict(request.query, offset=str(offset + limit), limit=str(limit))
            nxt = {"offset": offset + limit, "limit": limit,
                   "url": str(request.url.with_query(q))}
        return web.json_response({"items": items, "_pagination": {
            "offset": offset, "limit": limit, "total": len(users), "next": nxt}})

    server.app.router.add_get("/hub/api/", root)
    server.app.router.add_get("/hub/api/users", users_handler)


# --- hub --------------------------------------------------------------------------

async def test_hub_follows_pagination_over_three_pages(server):
    paginated_hub(server)
    await server.start()
    async with HubSignal(server.url + "/hub/api", TOKEN, page_size=1) as hub:
        assert isinstance(hub, HubSource)
        servers = await hub.ready_servers()
    listed = [r for r in server.requests if r.path == "/hub/api/users"]
    assert len(listed) == 3
    assert [r.query.get("offset", "0") for r in listed] == ["0", "1", "2"]
    assert all(r.query["state"] == "ready" and r.query["limit"] == "1" for r in listed)
    assert [s.session_id for s in servers] == ["alice/", "bob/", "bob/big", "carol/"]
    alice = servers[0]
    assert alice == alice and alice.admin and alice.groups == ("staff",)
    assert alice.last_activity == dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    assert alice.started == dt.datetime(2025, 12, 31, 23, tzinfo=UTC)
    assert alice.user_last_activity == dt.datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert alice.url == "/user/alice/" and alice.ready and alice.pending is None
    assert alice.user_options == {"profile": "gpu-1"}


async def test_hub_keeps_the_server_models_only_when_asked(server):
    """A cull_arbiter_hook is handed the hub's own server model (the launcher asks for them
    then); otherwise none is kept: with 20,000 servers they are ~20 MiB (docs/benchmarks.md)."""
    paginated_hub(server)
    await server.start()
    async with HubSignal(server.url + "/hub/api", TOKEN, page_size=2) as hub:
        plain = await hub.ready_servers()
    async with HubSignal(server.url + "/hub/api", TOKEN, page_size=2, keep_models=True) as hub:
        kept = await hub.ready_servers()
    assert [s.model for s in plain] == [{}] * 4
    assert [s.model for s in kept] == [ready_server("/user/alice/"), ready_server("/user/bob/"),
                                       ready_server("/user/bob/big/", name="big"), ready_server("/user/carol/")]
    assert [s.session_id for s in plain] == [s.session_id for s in kept]
    assert [s.user_options for s in plain] == [{"profile": "gpu-1"}] * 4


async def test_a_plain_list_is_not_a_user_list(server):
    """JupyterHub 5 (what the package requires) paginates and filters by state: a plain list,
    as hubs before 2.0 answered, is refused, not read as every user."""
    async def users_handler(request):
        server.requests.append(request)
        return web.json_response(USERS)
    server.app.router.add_get("/hub/api/users", users_handler)
    await server.start()
    async with HubSignal(server.url + "/hub/api", TOKEN) as hub:
        with pytest.raises(SignalError, match="not a user list"):
            await hub.ready_servers()
    assert [r.query["state"] for r in server.requests] == ["ready"]


async def test_hub_concurrency_is_bounded(server):
    active = peak = 0

    async def slow(request):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return web.json_response({"version": "6.1.1"})
    server.app.router.add_get("/hub/api/", slow)
    await server.start()
    async with HubSignal(server.url + "/hub/api", TOKEN, concurrency=2) as hub:
        await asyncio.gather(*(hub._get(server.url + "/hub/api/") for _ in range(8)))
    assert peak == 2


@pytest.mark.parametrize("fault", ["500", "timeout", "badjson", "refused", "notalist"])
async def test_hub_errors_raise_signal_error(server, fault, caplog):
    async def root(request):
        return web.json_response({"version": "6.1.1"})

    async def users_handler(request):
        if fault == "500":
            return web.Response(status=500, text="boom")
        if fault == "timeout":
            await asyncio.sleep(0.6)
        if fault == "notalist":
            return web.json_response({"unexpected": True})
        return web.Response(text="{not json", content_type="application/json")
    server.app.router.add_get("/hub/api/", root)
    server.app.router.add_get("/hub/api/users", users_handler)
    await server.start()
    url = server.url if fault != "refused" else "http://127.0.0.1:1"
    caplog.set_level("DEBUG")
    async with HubSignal(url + "/hub/api", TOKEN, timeout=0.3) as hub:
        with pytest.raises(SignalError) as err:
            await hub.ready_servers()
    assert err.value.source == "hub"
    assert TOKEN not in str(err.value) and TOKEN not in caplog.text
    if fault == "500":
        assert err.value.status == 500 and "HTTP 500" in err.value.message


def test_hub_server_fields_default():
    s = HubServer.from_models({"name": "x"}, "", {"ready": True})
    assert s.last_activity is None and s.started is None and s.user_options == {} and s.groups == ()


def test_hub_server_from_malformed_models_is_marked_invalid():
    good = {"ready": True, "started": "2026-01-01T00:00:00Z", "url": "/user/x/"}
    assert HubServer.from_models({"name": "x"}, "", good).invalid is None
    for server, user, field in [
        ({**good, "last_activity": "9999-12-31T23:59:59-23:59"}, {}, "last_activity"),
        ({**good, "started": 5}, {}, "started"),
        ({**good, "ready": "yes"}, {}, "ready"),
        ({**good, "user_options": []}, {}, "user_options"),
        ({**good, "user_options": {"profile": {"a": 1}}}, {}, "profile"),
        ("running", {}, "not an object"),
        (good, {"groups": "gpu"}, "groups"),
        (good, {"created": "0001-01-01T00:00:00+01:00"}, "created"),
    ]:
        s = HubServer.from_models({"name": "x", **user}, "", server)
        assert s.session_id == "x/" and s.invalid and field in s.invalid, (server, user, s.invalid)


# --- dcgm -------------------------------------------------------------------------

DCGM_TEXT = (
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    + series("DCGM_FI_DEV_GPU_UTIL", 1, 75, "jupyter-bob", "jhub")
    + series("DCGM_FI_DEV_GPU_UTIL", 0, 3, "jupyter-bob", "jhub")
    + series("DCGM_FI_DEV_GPU_UTIL", 2, 0, "jupyter-alice", "jhub")
    + series("DCGM_FI_DEV_GPU_UTIL", 3, 0)  # unallocated
    + "# HELP DCGM_FI_DEV_FB_USED FB used.\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
    + series("DCGM_FI_DEV_FB_USED", 0, 100, "jupyter-bob", "jhub")
    + series("DCGM_FI_DEV_FB_USED", 1, 10240, "jupyter-bob", "jhub")
    + series("DCGM_FI_DEV_FB_USED", 2, 0, "jupyter-alice", "jhub")
    + series("DCGM_FI_DEV_FB_USED", 3, 0)
    + "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE ratio.\n# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
    + series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 0.03, "jupyter-bob", "jhub")
    + series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1, 0.75, "jupyter-bob", "jhub")
    + series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 2, 0.004, "jupyter-alice", "jhub")
)


def test_dcgm_parse_groups_by_pod_ordered_by_gpu():
    r = parse_dcgm_text(DCGM_TEXT, T0)
    assert set(r) == {("jhub", "jupyter-bob"), ("jhub", "jupyter-alice")}
    bob = r[("jhub", "jupyter-bob")]
    assert bob.gpus == ("0", "1") and bob.util == (3.0, 75.0) and bob.fb_used_mib == (100.0, 10240.0)
    assert bob.t == T0
    assert r[("jhub", "jupyter-alice")].util == (0.0,)


def test_dcgm_gpu_ordering_is_numeric():
    text = "".join(series("DCGM_FI_DEV_GPU_UTIL", g, g, "p", "ns") for g in (10, 2, 1))
    assert parse_dcgm_text(text, T0)[("ns", "p")].util == (1.0, 2.0, 10.0)


def test_dcgm_mig_falls_back_to_engine_active():
    mig = ',GPU_I_ID="{}",GPU_I_PROFILE="1g.5gb"'
    text = (series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 0.5, "p1", "ns", uuid="A", extra=mig.format(2))
            + series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 0.25, "p1", "ns", uuid="A", extra=mig.format(1))
            + series("DCGM_FI_DEV_FB_USED", 0, 512, "p1", "ns", uuid="A", extra=mig.format(1)))
    r = parse_dcgm_text(text, T0)[("ns", "p1")]
    assert r.gpus == ("0/1", "0/2") and r.util == (25.0, 50.0) and r.fb_used_mib == (512.0, None)


def test_dcgm_exported_labels_win_even_when_empty():
    text = (series("DCGM_FI_DEV_GPU_UTIL", 0, 42, "jupyter-carol", "jhub", exported=True)
            + series("DCGM_FI_DEV_GPU_UTIL", 1, 0, "", "", exported=True))
    r = parse_dcgm_text(text, T0)
    assert set(r) == {("jhub", "jupyter-carol")}  # not the exporter's own pod
    assert r[("jhub", "jupyter-carol")].util == (42.0,)


def test_dcgm_uses_sample_timestamps_when_present():
    text = series("DCGM_FI_DEV_GPU_UTIL", 0, 5, "p", "ns").rstrip("\n") + " 1767225600000\n"
    assert parse_dcgm_text(text, T0 + dt.timedelta(hours=1))[("ns", "p")].t == T0


def test_dcgm_garbage_is_a_signal_error():
    with pytest.raises(SignalError) as err:
        parse_dcgm_text("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 12 x y z\n", T0)
    assert err.value.source == "dcgm"


async def test_dcgm_scrape_partial_on_one_failed_url(server):
    async def good(request):
        return web.Response(text=DCGM_TEXT)

    async def bad(request):
        return web.Response(status=503, text="down")

    async def slow(request):
        await asyncio.sleep(0.6)
        return web.Response(text="")
    server.app.router.add_get("/good", good)
    server.app.router.add_get("/bad", bad)
    server.app.router.add_get("/slow", slow)
    await server.start()
    async with DcgmScrapeSignal([server.url + "/good", server.url + "/bad", server.url + "/slow"],
                                timeout=0.3) as dcgm:
        assert isinstance(dcgm, GpuSource)
        r = await dcgm.utilization()
        assert ("jhub", "jupyter-bob") in r
        assert [e.source for e in dcgm.last_errors] == ["dcgm", "dcgm"]
    async with DcgmScrapeSignal([server.url + "/bad", server.url + "/slow"], timeout=0.3) as dcgm:
        with pytest.raises(SignalError) as err:
            await dcgm.utilization()
        assert err.value.source == "dcgm" and "503" in err.value.message and "0.3 s" in err.value.message


# --- kernels ----------------------------------------------------------------------

def kernel_app(server: Server, kernels, terminals, status=200, delay=0.0):
    async def handler(request):
        server.requests.append(request)
        await asyncio.sleep(delay)
        body = kernels if request.path.endswith("/kernels") else terminals
        if isinstance(body, int):
            return web.Response(status=body, text="nope")
        if isinstance(body, str):
            return web.Response(text=body, content_type="application/json")
        return web.json_response(body, status=status)
    server.app.router.add_get("/user/alice/api/kernels", handler)
    server.app.router.add_get("/user/alice/api/terminals", handler)


async def test_kernels_probe_reduces_models_and_never_tracks_activity(server):
    kernel_app(server, [
        {"id": "k1", "name": "python3", "last_activity": "2026-01-01T00:00:00.000000Z",
         "execution_state": "busy", "connections": 1},
        {"id": "k2", "name": "python3", "last_activity": None, "execution_state": "idle", "connections": 0},
    ], [{"name": "1", "last_activity": "2026-01-01T00:00:00Z"}])
    await server.start()
    async with KernelSignal(StaticProbeToken(TOKEN)) as ks:
        assert isinstance(ks, KernelSource)
        kernels, terminals = await ks.probe("alice", "", "/user/alice/", direct_url=server.url)
    assert kernels == [Kernel("busy", T0), Kernel("idle", None)]
    assert terminals == [T0]
    assert len(server.requests) == 2
    for r in server.requests:
        assert r.query["no_track_activity"] == "1"
        assert r.headers["Authorization"] == f"token {TOKEN}"


async def test_kernels_probe_joins_the_servers_address_and_its_path(server):
    kernel_app(server, [], [])
    await server.start()
    async with KernelSignal(StaticProbeToken(TOKEN)) as ks:
        assert await ks.probe("alice", "", "/user/alice/", server.url + "/") == ([], [])
        assert await ks.probe("alice", "", "user/alice", server.url) == ([], [])
        with pytest.raises(SignalError, match="address is not known"):
            await ks.probe("alice", "", "/user/alice/", None)
    assert {r.path for r in server.requests} == {"/user/alice/api/kernels", "/user/alice/api/terminals"}
    assert len(server.requests) == 4  # none without the address


async def test_kernels_terminals_disabled_means_none(server):
    kernel_app(server, [], 404)
    await server.start()
    async with KernelSignal(StaticProbeToken(TOKEN)) as ks:
        assert await ks.probe("alice", "", "/user/alice/", server.url) == ([], [])


@pytest.mark.parametrize("kernels,terminals,delay,needle", [
    (500, [], 0, "HTTP 500"),
    ([], [], 1.0, "no answer within 0.2 s"),
    ("{bad", [], 0, "not JSON"),
    ({"a": 1}, [], 0, "not a list"),
    ([], 403, 0, "HTTP 403"),
])
async def test_kernels_errors(server, kernels, terminals, delay, needle):
    kernel_app(server, kernels, terminals, delay=delay)
    await server.start()
    async with KernelSignal(StaticProbeToken(TOKEN), timeout=0.2) as ks:
        with pytest.raises(SignalError) as err:
            await ks.probe("alice", "", "/user/alice/", server.url)
    assert err.value.source == "kernels" and needle in err.value.message, err.value
    assert TOKEN not in str(err.value)


# --- prometheus -------------------------------------------------------------------

from jupyterhub_gpu_reclaim.signals.prometheus import DEFAULT_QUERY, PrometheusSignal  # noqa: E402


EXPORTER = {"pod": "dcgm-exporter-xyz", "namespace": "gpu-operator"}
PROM_ANSWER = vector(
    ({**EXPORTER, "exported_pod": "jupyter-bob", "exported_namespace": "jhub", "gpu": "1", "field": "util"}, 80),
    ({**EXPORTER, "exported_pod": "jupyter-bob", "exported_namespace": "jhub", "gpu": "0", "field": "util"}, 0.4),
    ({**EXPORTER, "exported_pod": "jupyter-bob", "exported_namespace": "jhub", "gpu": "0", "field": "fb_used"}, 300),
    ({**EXPORTER, "gpu": "2", "field": "util"}, 0),  # unallocated: Prometheus drops empty labels
    ({**EXPORTER, "exported_pod": "jupyter-mig", "exported_namespace": "jhub", "gpu": "0", "GPU_I_ID": "3",
      "field": "util"}, 12.5),
)


async def test_prometheus_one_query_per_cycle(server):
    seen = []

    async def query(request):
        seen.append(request.query["query"])
        return web.json_response(PROM_ANSWER)
    server.app.router.add_get("/api/v1/query", query)
    await server.start()
    async with PrometheusSignal(server.url + "/") as prom:
        assert isinstance(prom, GpuSource)
        r = await prom.utilization()
        await prom.utilization()
    assert seen == [DEFAULT_QUERY, DEFAULT_QUERY] and prom.queries == 2
    assert set(r) == {("jhub", "jupyter-bob"), ("jhub", "jupyter-mig")}
    bob = r[("jhub", "jupyter-bob")]
    assert bob.util == (0.4, 80.0) and bob.fb_used_mib == (300.0, None)
    assert bob.t == dt.datetime.fromtimestamp(1767225600.5, UTC)
    assert r[("jhub", "jupyter-mig")].gpus == ("0/3",)


def test_default_query_shape():
    # each metric in its own field: which one a GPU's utilization comes from is gpu_readings'
    # rule (engine activity on MIG even where GPU_UTIL exists), not the query's `or`
    assert DEFAULT_QUERY.count("DCGM_FI_DEV_GPU_UTIL") == 1 and '"field", "engine"' in DEFAULT_QUERY
    assert "exported_pod" in DEFAULT_QUERY and "pod_uid" in DEFAULT_QUERY and DEFAULT_QUERY.count(" or ") == 2


async def test_prometheus_custom_query_without_field_label(server):
    async def query(request):
        return web.json_response(vector(({"pod": "p", "namespace": "ns", "gpu": "0"}, 33)))
    server.app.router.add_get("/api/v1/query", query)
    await server.start()
    async with PrometheusSignal(server.url, query="DCGM_FI_DEV_GPU_UTIL") as prom:
        assert (await prom.utilization())[("ns", "p")].util == (33.0,)


@pytest.mark.parametrize("answer,needle", [
    (web.Response(status=500, text="oops"), "HTTP 500"),
    (web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400), "HTTP 400"),
    (web.json_response({"status": "error", "errorType": "timeout", "error": "query timed out"}), "query timed out"),
    (web.json_response({"status": "success", "data": {"resultType": "matrix", "result": []}}), "instant vector"),
    (web.json_response({"status": "success", "data": {"resultType": "vector", "result": {"metric": {}}}}), "malformed"),
    (web.Response(text="<html>", content_type="text/html"), "not JSON"),
    ("hang", "no answer within 0.2 s"),
    ("refused", "ClientConnector"),
])
async def test_prometheus_errors(server, answer, needle):
    async def query(request):
        if answer == "hang":
            await asyncio.sleep(0.6)
            return web.json_response(vector())
        return answer
    server.app.router.add_get("/api/v1/query", query)
    await server.start()
    url = "http://127.0.0.1:1" if answer == "refused" else server.url
    # the short timeout for the hanging answer only: on a loaded machine (CI: five workers on
    # two cores) an answer the test server gives at once took longer than 0.2 s
    async with PrometheusSignal(url, timeout=0.2 if answer == "hang" else 30.0) as prom:
        with pytest.raises(SignalError) as err:
            await prom.utilization()
    assert err.value.source == "prometheus" and needle in err.value.message, err.value


@pytest.mark.parametrize("answer", ["refused", 500])
async def test_a_password_in_the_prometheus_url_stays_out_of_errors(server, answer):
    # errors reach the log and the pages' evidence: the URL's password must not
    async def down(request):
        return web.Response(status=500, text="down")
    server.app.router.add_get("/api/v1/query", down)
    await server.start()
    base = "127.0.0.1:1" if answer == "refused" else server.url.removeprefix("http://")
    async with PrometheusSignal(f"http://reader:s3cr%40t@{base}", timeout=0.5) as prom:
        with pytest.raises(SignalError) as err:
            await prom.utilization()
    assert "s3cr" not in err.value.message and "reader:***@" in err.value.message, err.value


def test_pod_label_modes():
    from jupyterhub_gpu_reclaim.signals.gpu_readings import readings_from_series
    free = ("DCGM_FI_DEV_GPU_UTIL", {**EXPORTER, "gpu": "0"}, 0.0)
    held = ("DCGM_FI_DEV_GPU_UTIL", {**EXPORTER, "exported_pod": "p", "exported_namespace": "ns", "gpu": "1"}, 5.0)
    assert set(readings_from_series([free, held], T0)) == {("ns", "p")}
    assert set(readings_from_series([free], T0, "exported_pod")) == set()
    assert set(readings_from_series([free], T0, "pod")) == {("gpu-operator", "dcgm-exporter-xyz")}
    assert set(readings_from_series([free, held], T0, "pod")) == {("gpu-operator", "dcgm-exporter-xyz")}
    with pytest.raises(ValueError):
        readings_from_series([], T0, "podname")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PrometheusSignal("http://x", pod_label="nope")  # type: ignore[arg-type]


# --- pods -------------------------------------------------------------------------

from jupyterhub_gpu_reclaim.signals.pods import PodSignal, pod_info  # noqa: E402


def test_pod_info_reads_kubespawner_pods():
    p = pod_info(k8s_pod("jupyter-alice-40x", "alice@x", gpus=2))
    assert (p.user, p.server, p.gpus, p.node, p.phase, p.ready) == ("alice@x", "", 2, "gpu-1", "Running", True)
    assert p.direct_url == "http://127.5.0.3:8888" and p.session_id == "alice@x/" and p.created == T0
    assert not p.waits_for_gpu
    waiting = pod_info(k8s_pod("jupyter-erin", "erin", gpus=2, phase="Pending",
                               unschedulable="0/4 nodes are available: 2 Insufficient nvidia.com/gpu."))
    assert waiting.waits_for_gpu and waiting.direct_url is None and not waiting.ready
    cpu_wait = pod_info(k8s_pod("jupyter-f", "f", gpus=0, phase="Pending", unschedulable="Insufficient cpu"))
    assert not cpu_wait.waits_for_gpu
    assert not pod_info(k8s_pod("jupyter-g", "g", ready=False)).ready


def test_pod_info_reads_the_gpu_type_a_profile_selects():
    """A profile that picks a GPU type puts GPU feature discovery's product label in the
    pod's nodeSelector: policy rules match on it, with no read of the node."""
    pod = k8s_pod("jupyter-h", "h")
    assert pod_info(pod).gpu_type == ""
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "gpu"}
    assert pod_info(pod).gpu_type == "NVIDIA-A100-SXM4-80GB"


def test_pod_signal_applies_watch_events_and_counts_demand():
    signal = PodSignal("jhub")
    with pytest.raises(SignalError):
        signal.snapshot(60)  # nothing listed yet: missing data, not zero demand
    signal.synced.set()
    signal._apply({"type": "ADDED", "object": k8s_pod("jupyter-a", "a")})
    signal._apply({"type": "ADDED", "object": k8s_pod(
        "jupyter-b", "b", gpus=2, phase="Pending", unschedulable="0/2 nodes: Insufficient nvidia.com/gpu")})
    signal._apply({"type": "ADDED", "object": k8s_pod("jupyter-c", "c", gpus=1, server="big")})
    snapshot = signal.snapshot(60)
    assert snapshot.pending_gpus == 2 and set(snapshot.by_session) == {"a/", "b/", "c/big"}
    signal._apply({"type": "DELETED", "object": k8s_pod("jupyter-b", "b")})
    assert signal.snapshot(60).pending_gpus == 0 and signal._resource_version == "7"
