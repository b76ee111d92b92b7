"""The node agent's pod watch (sim.nodeagent.podwatch) when its resourceVersion has expired: the
real API server answers such a watch with an ERROR event carrying a 410 Status, and the watch
must list again, reporting the pods that went meanwhile as DELETED. The real API server of the
tests could not be brought to answer 410 in a test's time (a watch from resourceVersion 1 after
an etcd compaction was still served from its watch cache), so this server answers as it does
on the wire; resumption from the last version is tested against the real one
(tests/controlplane/test_node_pods.py)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpu_reclaim_sim.nodeagent.podwatch import PodWatch

from ..support.fakes import serve


def _pod(name: str, version: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version},
            "spec": {"nodeName": "node-1"}}


async def test_an_expired_watch_lists_again_and_reports_what_went_meanwhile():
    lists = [[_pod("a", "5"), _pod("b", "6")], [_pod("b", "15"), _pod("c", "16")]]
    asked: list[dict[str, str]] = []
    watching, finished = asyncio.Event(), asyncio.Event()

    async def pods(request: web.Request) -> web.StreamResponse:
        asked.append(dict(request.query))
        assert request.query["fieldSelector"] == "spec.nodeName=node-1"
        if request.query.get("watch", "").lower() != "true":  # the client sends True
            items = lists.pop(0)
            return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": items,
                                      "metadata": {"resourceVersion": str(10 * (2 - len(lists)))}})
        response = web.StreamResponse()
        await response.prepare(request)
        if request.query["resourceVersion"] == "10":  # expired meanwhile: the API server's answer
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": "too old resource version: 10 (12)", "reason": "Expired", "code": 410}
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            return response
        watching.set()
        await finished.wait()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner, url = await serve(app)
    seen: list[tuple[str, str]] = []
    try:
        async with k8s.ApiClient(k8s.Configuration(host=url)) as api:
            watch = PodWatch(api, "node-1", lambda type_, pod: seen.append((type_, pod["metadata"]["name"])))
            task = asyncio.create_task(watch.run())
            await asyncio.wait_for(watching.wait(), 10)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        finished.set()
        await runner.cleanup()
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "c")]
    assert watch.lists == 2
    assert [q.get("resourceVersion") for q in asked] == [None, "10", None, "20"]
    assert asked[1]["allowWatchBookmarks"].lower() == "true"
