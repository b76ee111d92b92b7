"""The fakes process of benchmarks/service_cycle.py: the hub's REST API, Prometheus, the
single-user servers and the Kubernetes API's pods, counting every request by kind."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
import time
from typing import Any

from benchmarks.cycle.scene import DEFAULT_PAGE, MAX_PAGE, NAMESPACE, Scene, iso, pod_json, user_name


def serve_fakes(port_file: str, scene: Scene) -> None:
    from aiohttp import web

    now = dt.datetime.now(dt.timezone.utc)
    counts: dict[str, int] = {}

    def count(kind: str) -> None:
        counts[kind] = counts.get(kind, 0) + 1

    users = []
    for i in range(scene.servers):
        name = user_name(i)
        gpu = scene.gpu(i)
        active = iso(now - dt.timedelta(seconds=(i * 7) % 1800))
        started = iso(now - dt.timedelta(hours=3, seconds=i % 3600))
        users.append({
            "kind": "user", "name": name, "admin": i == 0, "roles": ["user"],
            "groups": ["gpu-users"] if gpu else [],
            "created": iso(now - dt.timedelta(days=30)), "last_activity": active,
            "pending": None,
            "servers": {"": {
                "name": "", "full_name": f"{name}/", "last_activity": active, "started": started,
                "pending": None, "ready": True, "stopped": False, "url": f"/user/{name}/",
                "user_options": {"profile": "gpu-a100" if gpu else "cpu-small"},
                "progress_url": f"/hub/api/users/{name}/server/progress",
            }},
        })
    by_name = {u["name"]: u for u in users}

    # ---- hub
    async def hub_root(request: web.Request) -> web.Response:
        count("hub:version")
        return web.json_response({"version": "5.3.0"})

    async def hub_users(request: web.Request) -> web.Response:
        count("hub:users-page")
        q = request.query
        state = q.get("state")
        selected = users if state in (None, "ready") else []
        paginated = "application/jupyterhub-pagination+json" in request.headers.get("Accept", "")
        offset = int(q.get("offset", 0))
        limit = min(int(q.get("limit", DEFAULT_PAGE)), MAX_PAGE) if paginated else MAX_PAGE
        items = selected[offset:offset + limit]
        if not paginated:
            return web.json_response(items)
        nxt = None
        if offset + limit < len(selected):
            query = dict(q)
            query.update(offset=str(offset + limit), limit=str(limit))
            url = request.url.with_query(query)
            nxt = {"offset": offset + limit, "limit": limit, "url": str(url)}
        return web.json_response({"items": items, "_pagination": {
            "offset": offset, "limit": limit, "total": len(selected), "next": nxt}})

    async def hub_user(request: web.Request) -> web.Response:
        count("hub:user")
        user = by_name.get(request.match_info["name"])
        if user is None:
            return web.json_response({"status": 404, "message": "no such user"}, status=404)
        return web.json_response(user)

    async def hub_delete(request: web.Request) -> web.Response:
        count("hub:delete")
        return web.Response(status=204)

    # the probe-token API's tokens (spawner/probe_tokens.py, which answers with the hub's token
    # model, apihandlers/base.py `token_model`): kept until deleted, so that a run's sweep at
    # start (`GET .../gpu-reclaim/tokens`) lists what an earlier run left
    probe_tokens: dict[str, dict[str, Any]] = {}
    token_ids = itertools.count(1)  # not the request counter, which /bench/reset clears

    async def hub_token_mint(request: web.Request) -> web.Response:
        count("hub:token-mint")
        body = await request.json()
        name = request.match_info["name"]
        scopes = body["scopes"] + [f"read:users:name!user={name}", f"read:users:groups!user={name}"]
        model = {"user": name, "id": f"a{next(token_ids)}", "kind": "api_token",
                 "roles": [], "scopes": scopes, "created": iso(now), "last_activity": None,
                 "expires_at": iso(now + dt.timedelta(seconds=body["expires_in"])),
                 "note": body["note"], "session_id": None, "oauth_client": "JupyterHub"}
        probe_tokens[model["id"]] = model
        return web.json_response({**model, "token": f"probe-{name}"}, status=201)

    async def hub_token_delete(request: web.Request) -> web.Response:
        count("hub:token-delete")
        model = probe_tokens.get(request.match_info["id"])
        if model is None or model["user"] != request.match_info["name"]:
            return web.json_response({"status": 404, "message": "No such probe token"}, status=404)
        del probe_tokens[model["id"]]
        return web.Response(status=204)

    async def hub_token_list(request: web.Request) -> web.Response:
        count("hub:token-list")
        return web.json_response({"api_tokens": list(probe_tokens.values())})

    async def hub_whoami(request: web.Request) -> web.Response:
        # the service's own model (JupyterHub's GET /user for a service token): its scopes say
        # that the probe-token API mints (the README's registration, configure_hub)
        count("hub:whoami")
        return web.json_response({"kind": "service", "name": "gpu-reclaim", "scopes": [
            "list:users", "read:users:activity", "read:servers", "delete:servers", "read:users:groups",
            "custom:gpu-reclaim:probe-tokens"]})

    async def hub_other(request: web.Request) -> web.Response:
        count("hub:other")
        return web.json_response({"status": 404, "message": "not here"}, status=404)

    # ---- prometheus
    async def prom_query(request: web.Request) -> web.Response:
        count("prometheus:query")
        ts = time.time()
        result = []
        for i in filter(scene.gpu, range(scene.servers)):
            pod = f"jupyter-{user_name(i)}"
            util = 0.0 if scene.idle(i) else float(30 + i % 60)
            base = {"exported_pod": pod, "exported_namespace": NAMESPACE, "gpu": "0",
                    "pod": f"dcgm-exporter-{i % 125}", "namespace": "gpu-operator"}
            result.append({"metric": {**base, "field": "util"}, "value": [ts, f"{util:g}"]})
            result.append({"metric": {**base, "field": "fb_used"}, "value": [ts, str(1000 + i % 30000)]})
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    # ---- single-user servers
    kernel_la = iso(now - dt.timedelta(minutes=40))

    async def kernels(request: web.Request) -> web.Response:
        count("server:kernels")
        return web.json_response([{"id": "k1", "name": "python3", "execution_state": "idle",
                                   "last_activity": kernel_la, "connections": 1}])

    async def terminals(request: web.Request) -> web.Response:
        count("server:terminals")
        return web.json_response([])

    # ---- Kubernetes API: the single-user pods (list, and a watch that stays quiet)
    pod_list: list[dict[str, Any]] | None = None

    async def k8s_pods(request: web.Request) -> web.StreamResponse:
        nonlocal pod_list
        if request.query.get("watch", "").lower() in ("true", "1"):
            count("k8s:watch")
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await asyncio.sleep(float(request.query.get("timeoutSeconds", "10")))
            return resp
        count("k8s:list")
        if pod_list is None:
            created = iso(now - dt.timedelta(hours=3))
            pod_list = [pod_json(i, scene.gpu(i), server_port, created) for i in range(scene.servers)]
        start = int(request.query.get("continue") or 0)  # limit/continue as the apiserver pages
        limit = int(request.query.get("limit") or 0) or len(pod_list)
        meta: dict[str, Any] = {"resourceVersion": "10000"}
        if start + limit < len(pod_list):
            meta["continue"] = str(start + limit)
        return web.Response(body=json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                                             "items": pod_list[start:start + limit]}).encode(),
                            content_type="application/json")

    async def counters(request: web.Request) -> web.Response:
        return web.json_response(counts)

    async def reset(request: web.Request) -> web.Response:
        counts.clear()
        return web.json_response({})

    hub = web.Application()
    hub.add_routes([web.get("/hub/api/", hub_root), web.get("/hub/api/users", hub_users),
                    web.get("/hub/api/users/{name}", hub_user),
                    web.delete("/hub/api/users/{name}/server", hub_delete),
                    web.delete("/hub/api/users/{name}/servers/{server}", hub_delete),
                    web.get("/hub/api/user", hub_whoami),
                    # the probe-token API (spawner/probe_tokens.py), which answers as the hub's own
                    web.post("/hub/api/gpu-reclaim/users/{name}/tokens", hub_token_mint),
                    web.delete("/hub/api/gpu-reclaim/users/{name}/tokens/{id}", hub_token_delete),
                    web.get("/hub/api/gpu-reclaim/tokens", hub_token_list),
                    web.get("/bench/counters", counters), web.post("/bench/reset", reset),
                    web.route("*", "/{tail:.*}", hub_other)])
    prom = web.Application()
    prom.add_routes([web.get("/api/v1/query", prom_query)])
    srv = web.Application()
    srv.add_routes([web.get("/user/{name}/api/kernels", kernels),
                    web.get("/user/{name}/api/terminals", terminals)])
    k8s = web.Application()
    k8s.add_routes([web.get(f"/api/v1/namespaces/{NAMESPACE}/pods", k8s_pods)])
    server_port = 0

    async def main() -> None:
        nonlocal server_port
        ports = []
        runners = []
        for app in (hub, prom, srv, k8s):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
            await site.start()
            runners.append(runner)
            ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        server_port = ports[2]
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"hub": ports[0], "prometheus": ports[1], "servers": ports[2],
                       "kubernetes": ports[3]}, f)
        os.replace(tmp, port_file)
        await asyncio.Event().wait()

    asyncio.run(main())
