"""The simulated API server's HTTP layer with real clients: errors as Status objects, input
that must not crash it, TLS with tokens, and response compression as kube-apiserver's
APIResponseCompression does it (the server on a stand-in cluster, as in test_apiserver.py).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from ..support.apiserver_sim import POD, TOKEN, Sim, apiserver_fixtures, make_namespace, pod_manifest

sim, core = apiserver_fixtures("apiserver-http")


# --- errors and robustness ---------------------------------------------------------------

def test_http_errors_are_status_objects(sim: Sim) -> None:
    status, body = sim.http("POST", "/api/v1/namespaces/jhub/pods", raw=b"{not json")
    assert status == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    status, body = sim.http("GET", "/api/v1/namespaces/jhub/widgets")
    assert status == 404 and body["kind"] == "Status"
    status, body = sim.http("GET", "/apis/batch/v1/jobs")  # a group the simulator does not serve
    assert status == 404
    status, body = sim.http("GET", "/api/v1/pods", token="wrong")
    assert status == 401 and body["reason"] == "Unauthorized"
    status, body = sim.http("PUT", "/api/v1/namespaces/jhub/pods", {})
    assert status == 405
    status, body = sim.http("PATCH", "/api/v1/namespaces/jhub/pods/none", {}, content_type="text/plain")
    assert status in (404, 415)
    status, body = sim.http("POST", "/api/v1/namespaces/nowhere/pods", pod_manifest("x"))
    assert status == 404 and body["message"] == 'namespaces "nowhere" not found'
    status, body = sim.http("POST", "/api/v1/namespaces/jhub/pods", {**pod_manifest("x"),
                                                                     "metadata": {"name": "x", "namespace": "default"}})
    assert status == 400 and "does not match the namespace" in body["message"]
    status, text = sim.http("GET", "/healthz", token=None)
    assert status == 200 and text == "ok"
    status, version = sim.http("GET", "/version", token=None)
    assert status == 200 and version["major"] == "1"


def test_nothing_crashes_the_server(sim: Sim) -> None:
    def broken(*args: Any, **kwargs: Any) -> Path:
        raise RuntimeError("boom")

    make_namespace(sim, "crash")
    sim.call(sim.cluster.create, POD, pod_manifest("c1", nodeName="node-1"), "crash")
    original = sim.cluster.pod_log_path
    sim.cluster.pod_log_path = broken  # type: ignore[method-assign]
    try:
        status, body = sim.http("GET", "/api/v1/namespaces/crash/pods/c1/log")
    finally:
        sim.cluster.pod_log_path = original  # type: ignore[method-assign]
    assert status == 500 and body["kind"] == "Status" and body["code"] == 500
    for raw in (b"\xff\xfe", b"[]", b"null", b'{"metadata": 5}', b'{"spec": {"containers": "x"}}'):
        status, body = sim.http("POST", "/api/v1/namespaces/crash/pods", raw=raw)
        assert 400 <= status < 500, (raw, status, body)
    status, body = sim.http("PATCH", "/api/v1/namespaces/crash/pods/c1", [{"op": "remove", "path": "/nope"}],
                            content_type="application/json-patch+json")
    assert status == 422
    assert sim.http("GET", "/api/v1/namespaces/crash/pods/c1")[0] == 200


def test_tls_requires_the_token_and_kubectl_sends_it(tmp_path: Path) -> None:
    tls = Sim(tmp_path, tls=True)
    try:
        assert tls.url.startswith("https://")
        # no credentials over HTTPS: system:anonymous, who may read /version and no more
        status, body = tls.http("GET", "/api/v1/pods", token=None)
        assert status == 403 and body["reason"] == "Forbidden"
        assert body["message"] == ('pods is forbidden: User "system:anonymous" cannot list resource "pods" in API '
                                   'group "" at the cluster scope')
        status, body = tls.http("GET", "/api", token=None)
        assert (status, body["message"]) == (403, 'forbidden: User "system:anonymous" cannot get path "/api"')
        assert tls.http("GET", "/version", token=None)[0] == 200
        assert tls.http("GET", "/api/v1/pods", token="wrong")[0] == 401
        assert tls.http("GET", "/api/v1/pods")[0] == 200
        assert "node-1" in tls.kubectl("get", "nodes").stdout
        assert [n.metadata.name for n in tls.core().list_node().items] == ["node-1"]
    finally:
        tls.close()


# --- response compression ------------------------------------------------------------------

def raw_get(sim: Sim, path: str, accept_encoding: str | None) -> tuple[Any, bytes]:
    """GET `path` as the bytes on the wire (urllib decodes nothing), and the headers."""
    req = urllib.request.Request(sim.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    if accept_encoding is not None:
        req.add_header("Accept-Encoding", accept_encoding)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers, resp.read()


def decoded(headers: Any, body: bytes) -> Any:
    assert headers["Content-Encoding"] == "gzip" and headers["Vary"] == "Accept-Encoding"
    return json.loads(gzip.decompress(body))


def test_large_responses_are_gzipped_for_clients_that_ask(sim: Sim, core: k8s.CoreV1Api) -> None:
    """The apiserver's APIResponseCompression: a body over 128 KiB is gzipped when the
    request's Accept-Encoding has a `gzip` token; kubectl, client-go and aiohttp ask, the
    official client does not. Every client decodes the same list the plain response holds,
    also after objects changed, came and went (the simulator keeps runs of a list
    compressed between lists)."""
    make_namespace(sim, "gzip")
    note = "x" * 3000  # ~60 pods of ~3.5 KB: a list of about 200 KiB
    for i in range(60):
        core.create_namespaced_pod("gzip", pod_manifest(f"p{i:02d}", labels={"app": "gz", "i": str(i)}) | {
            "metadata": {"name": f"p{i:02d}", "labels": {"app": "gz"}, "annotations": {"note": f"{i}{note}"}}})
    path = "/api/v1/namespaces/gzip/pods"

    def same_list_everywhere() -> None:
        headers, plain = raw_get(sim, path, None)  # urllib sends `Accept-Encoding: identity`
        assert "Content-Encoding" not in headers and len(plain) > 128 * 1024
        expected = json.loads(plain)
        for encoding in ("gzip", "gzip, deflate", "br, gzip"):
            assert decoded(*raw_get(sim, path, encoding)) == expected, encoding
        # kubectl asks for gzip (Go's transport does) and decodes it; the transport then drops
        # Content-Encoding from what -v=8 shows, and leaves the Vary that only a gzipped answer has
        proc = sim.kubectl("get", "--raw", path, "-v=8")
        assert json.loads(proc.stdout) == expected
        assert "Vary: Accept-Encoding" in proc.stderr
        # a page (kubectl get -o json lists with limit=500) is compressed as well
        proc = sim.kubectl("get", "pods", "-n", "gzip", "-o", "json", "-v=8")
        assert [p["metadata"]["name"] for p in json.loads(proc.stdout)["items"]] == \
            [p["metadata"]["name"] for p in expected["items"]]
        assert "Vary: Accept-Encoding" in proc.stderr
        # the official client sends no gzip token: a plain body; given one, urllib3 decodes it
        response = core.list_namespaced_pod("gzip", _preload_content=False)
        assert "Content-Encoding" not in response.headers and json.loads(response.data) == expected
        response = core.list_namespaced_pod("gzip", _preload_content=False, _headers={"Accept-Encoding": "gzip"})
        assert response.headers["Content-Encoding"] == "gzip" and json.loads(response.data) == expected
        # kubernetes_asyncio (KubeSpawner's client): aiohttp asks for gzip and decodes it
        assert asyncio.run(asyncio_list()) == ("gzip", expected)

    async def asyncio_list() -> tuple[str, Any]:
        from kubernetes_asyncio import client as aclient
        from kubernetes_asyncio import config as aconfig

        async with await aconfig.new_client_from_config(config_file=str(sim.kubeconfig)) as api_client:
            response = await aclient.CoreV1Api(api_client).list_namespaced_pod("gzip", _preload_content=False)
            return response.headers["Content-Encoding"], json.loads(await response.read())

    same_list_everywhere()
    core.patch_namespaced_pod("p07", "gzip", {"metadata": {"labels": {"changed": "yes"}}})
    core.delete_namespaced_pod("p31", "gzip", grace_period_seconds=0)
    core.create_namespaced_pod("gzip", {**pod_manifest("p31a"), "metadata": {"name": "p31a",
                                                                            "annotations": {"note": note}}})
    same_list_everywhere()
    assert decoded(*raw_get(sim, "/api/v1/pods?labelSelector=app%3Dgz", "gzip"))["items"] == \
        json.loads(raw_get(sim, "/api/v1/pods?labelSelector=app%3Dgz", None)[1])["items"]


def test_small_responses_watches_and_other_encodings_are_not_compressed(sim: Sim, core: k8s.CoreV1Api) -> None:
    make_namespace(sim, "nogzip")
    core.create_namespaced_pod("nogzip", pod_manifest("small"))
    for path in ("/api/v1/namespaces/nogzip/pods", "/api/v1/namespaces/nogzip/pods/small", "/api/v1"):
        headers, body = raw_get(sim, path, "gzip")
        assert "Content-Encoding" not in headers and json.loads(body), path
    big = {"metadata": {"name": "big"}, "data": {"blob": "y" * 200_000}}
    core.create_namespaced_config_map("nogzip", big)
    path = "/api/v1/namespaces/nogzip/configmaps/big"
    assert decoded(*raw_get(sim, path, "gzip"))["data"] == big["data"]  # one large object is compressed too
    assert json.loads(sim.kubectl("get", "configmap", "big", "-n", "nogzip", "-o", "json").stdout)["data"] == \
        big["data"]
    for encoding in ("deflate", "identity", "gzip;q=1.0", "GZIP"):  # the apiserver matches the bare token only
        headers, body = raw_get(sim, path, encoding)
        assert "Content-Encoding" not in headers and json.loads(body)["data"] == big["data"], encoding
    headers, body = raw_get(sim, "/api/v1/namespaces/nogzip/configmaps?watch=1&timeoutSeconds=1", "gzip")
    assert "Content-Encoding" not in headers and b'"name":"big"' in body  # watch events go as they are


def counted_compressions(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the simulator compresses from now on (each `Deflated.of`'s input), in order."""
    from gpu_reclaim_sim.apiserver import compression

    compressed: list[bytes] = []
    original = compression.Deflated.of.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, data: bytes, zdict: bytes | None = None) -> Any:
        compressed.append(data)
        return original(cls, data, zdict)

    monkeypatch.setattr(compression.Deflated, "of", classmethod(counted))
    return compressed


def wait_until_compressed(compressed: list[bytes], marker: bytes) -> None:
    deadline = time.monotonic() + 10
    while not any(marker in data for data in compressed) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the background compression took it
    assert any(marker in data for data in compressed)


@pytest.mark.parametrize("knob", ["recompress_quiet", "recompress_after"])
def test_a_list_after_a_change_finds_it_compressed_already(sim: Sim, core: k8s.CoreV1Api,
                                                          monkeypatch: pytest.MonkeyPatch, knob: str) -> None:
    """A list a client fetched gzipped is compressed again in the background a moment
    after its objects change, so the first list after the change compresses nothing: once
    its kind has been quiet for `recompress_quiet`, or while it keeps changing,
    `recompress_after` after the change (each knob alone, the other set out of reach)."""
    ns = f"recompress-{knob.rpartition('_')[2]}"
    make_namespace(sim, ns)
    for i in range(60):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i:02d}"},
                                               "data": {"blob": f"{i}" * 3000}})
    path = f"/api/v1/namespaces/{ns}/configmaps"
    monkeypatch.setattr(sim.server.listings, knob, 0.1)  # first: the loop never sleeps long
    other = "recompress_after" if knob == "recompress_quiet" else "recompress_quiet"
    monkeypatch.setattr(sim.server.listings, other, 60.0)
    decoded(*raw_get(sim, path, "gzip"))
    core.patch_namespaced_config_map("c30", ns, {"data": {"blob": "changed"}})
    compressed = counted_compressions(monkeypatch)
    wait_until_compressed(compressed, b"changed")
    compressed.clear()
    listed = decoded(*raw_get(sim, path, "gzip"))
    assert [c["data"]["blob"] for c in listed["items"] if c["metadata"]["name"] == "c30"] == ["changed"]
    assert len(compressed) == 1 and compressed[0].startswith(b'{"kind":"ConfigMapList"')  # the list's head only


def test_a_list_fetched_small_is_compressed_once_it_grows(sim: Sim, core: k8s.CoreV1Api,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that accepts gzip fetched a list while it was too small to compress (as
    KubeSpawner's reflector first lists no pods, with an empty `fieldSelector=`); once the
    list has grown past the threshold it is compressed in the background, and the next
    list, without the empty selector (the same selection), compresses only its head."""
    make_namespace(sim, "grows")
    path = "/api/v1/namespaces/grows/configmaps"
    headers, body = raw_get(sim, path + "?fieldSelector=", "gzip")
    assert "Content-Encoding" not in headers
    assert [c["metadata"]["name"] for c in json.loads(body)["items"]] == ["kube-root-ca.crt"]
    compressed = counted_compressions(monkeypatch)
    for i in range(60):
        core.create_namespaced_config_map("grows", {"metadata": {"name": f"c{i:02d}"},
                                                    "data": {"blob": f"{i}" * 3000}})
    wait_until_compressed(compressed, b'"name":"c59"')
    compressed.clear()
    listed = decoded(*raw_get(sim, path, "gzip"))
    assert [c["metadata"]["name"] for c in listed["items"]] == [f"c{i:02d}" for i in range(60)] + ["kube-root-ca.crt"]
    assert len(compressed) == 1 and compressed[0].startswith(b'{"kind":"ConfigMapList"')  # the list's head only
