"""The simulated cluster's API server: the Kubernetes REST/JSON API over aiohttp.

Unmodified kubectl, the official `kubernetes` client, kubernetes_asyncio and KubeSpawner
talk to it through an ordinary kubeconfig (server URL + bearer token). It serves
discovery, CRUD with the apiserver's status codes and `Status` errors, list paging and
selectors, watches (see `watch.py`), PATCH in the three JSON flavours (see `patch.py`),
server-side Table printing for `kubectl get` (see `tables.py`), pod logs, exec and attach,
binding and eviction, and gzip of large responses for clients that ask (see `compression.py`).
This module authenticates, authorizes and routes a request, and answers reads, watches
and reviews. Validation, defaulting and admission live in `admission/`; what a path names
and the discovery documents in `discovery.py`, reading requests and writing responses in
`httpio.py`, the lists kept between requests in `listings.py`, the writes in `writes.py`,
pod logs in `podlogs.py`, exec and attach in `podexec.py`.

Not served: protobuf (clients fall back to JSON), aggregated discovery (clients fall back
to the legacy discovery documents), OpenAPI v2 and the schemas in OpenAPI v3 (v3 carries
just enough for kubectl to leave validation to the server; see `openapi.py`),
server-side apply."""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from ..rbac import authn, certificates, serviceaccounts
from ..network import kubernetes_service
from . import openapi, tables
from .discovery import (
    Handler,
    Target,
    _groups,
    _only,
    _path_not_found,
    _version,
    discovery_core_versions,
    discovery_group,
    discovery_groups,
    discovery_resources,
    parse_target,
)
from ..errors import ApiError
from .httpio import USER, _body, _compress, _filter, _int_param, _json, _paginate, _status_response
from .listings import Listings
from .podexec import PodExec
from .podlogs import PodLogs
from ..rbac.authorizer import TRUE, Attributes, Authorizer, request_attributes
from ..rbac.defaults import RoleAggregator, bootstrap
from ..rbac.reviews import review
from ..resources import ALL
from .watch import WatchStream
from .writes import Writes

log = logging.getLogger("gpu_reclaim_sim.apiserver.server")


MIN_WATCH_TIMEOUT = 300.0  # a watch without timeoutSeconds lasts 5-10 min (jittered)


_TRUE = TRUE


class ApiServer:
    """`ApiServer(cluster)`; `await start()`, `url`, `await stop()`.

    It always serves HTTPS (the secure port, `secure_url`) with a certificate made at
    construction (`ca_pem`), where pods reach it through the `kubernetes` Service
    (sim.network.kubernetes_service). With `tls=False` (the
    default: the scenario's `api_tls`) the kubeconfig's server (`url`) is a second,
    plain-HTTP port where a request without credentials acts as `system:unsecured`, as the
    old insecure port did. Requests are authenticated (see `authn`) and authorized (see
    `rbac`; the scenario's `apiserver.authorization`, RBAC by default)."""

    def __init__(self, cluster: Any, *, tls: bool | None = None) -> None:
        self.cluster = cluster
        self.store = cluster.store
        scenario = cluster.scenario
        self.tls = scenario.api_tls if tls is None else tls
        tls_dir = Path(cluster.data_dir) / "apiserver-tls"
        self._ssl, self.ca_pem = certificates.server_context(
            tls_dir, scenario.api_host, kubernetes_service.cluster_ip(self.store.service_cidr))
        self.ca_file = tls_dir / certificates.CERT_FILE
        self.tokens = serviceaccounts.TokenIssuer(self.store)
        self.authorizer = Authorizer(self.store, scenario.authorization_mode)
        self.aggregator = RoleAggregator(self.store)
        self._runner: web.AppRunner | None = None
        self._sites: list[web.TCPSite] = []
        self._port: int | None = None  # the kubeconfig's port
        self._secure_port: int | None = None
        self._streams: set[WatchStream] = set()
        self._stopping = asyncio.Event()
        self.listings = Listings(self.store)
        self.writes = Writes(cluster, self.authorizer)
        self.logs = PodLogs(cluster, self._stopping)
        self.exec = PodExec(cluster, self.authorizer, self.logs)
        self.app = web.Application(middlewares=[self._middleware], client_max_size=16 * 2**20)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The kubeconfig's server: HTTPS with `tls`, else the plain-HTTP port."""
        if self._port is None:
            raise RuntimeError("the API server has not started")
        return f"{'https' if self.tls else 'http'}://{self.cluster.scenario.api_host}:{self._port}"

    @property
    def secure_url(self) -> str:
        if self._secure_port is None:
            raise RuntimeError("the API server has not started")
        return f"https://{self.cluster.scenario.api_host}:{self._secure_port}"

    def kubeconfig_cluster(self, secure: bool | None = None) -> dict[str, Any]:
        """The `cluster` entry of a kubeconfig for this server (`secure=True`: the HTTPS
        port even where the admin kubeconfig uses plain HTTP)."""
        if secure or (secure is None and self.tls):
            return {"server": self.secure_url,
                    "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}
        return {"server": self.url}

    async def start(self) -> None:
        self._stopping.clear()
        bootstrap(self.store, self.cluster.create)  # the aggregator fills admin/edit/view as they come
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        scenario = self.cluster.scenario
        self._secure_port = await self._listen(scenario.api_port if self.tls else 0, self._ssl)
        self._port = self._secure_port if self.tls else await self._listen(scenario.api_port, None)
        kubernetes_service.ensure(self.store, self.cluster.create, scenario.api_host, self._secure_port)
        self.listings.start()
        log.info("API server listening on %s (secure port %s)", self.url, self.secure_url)

    async def _listen(self, port: int, ssl_context: Any) -> int:
        assert self._runner is not None
        site = web.TCPSite(self._runner, self.cluster.scenario.api_host, port, ssl_context=ssl_context)
        await site.start()
        self._sites.append(site)
        server = site._server
        assert isinstance(server, asyncio.Server) and server.sockets  # aiohttp types it an AbstractServer
        return server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._stopping.set()
        for stream in list(self._streams):
            stream.stop()
        self.listings.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._sites = []

    # --- plumbing --------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            request[USER] = self._authenticate(request)
            response = await handler(request)
            status = response.status
            if isinstance(response, web.Response) and response.content_type == "application/json":
                _compress(request, response)
            return response
        except ApiError as e:
            status = e.code
            return _status_response(e)
        except web.HTTPException as e:
            status = e.status
            return _status_response(ApiError(e.status, e.reason))
        except asyncio.CancelledError:
            raise
        except Exception:  # nothing a client sends may take the server down
            log.exception("internal error serving %s %s", request.method, request.path_qs)
            return _status_response(ApiError(500, "Internal error occurred: see the simulator's log"))
        finally:
            log.debug("%s %s -> %s (%.1f ms)", request.method, request.path_qs, status,
                      (time.perf_counter() - started) * 1000)
            if status == 403 and USER in request:  # as an audit log records a refusal: who, what
                log.info("forbidden: %s %s by %s", request.method, request.path_qs, request[USER].name)

    def _authenticate(self, request: web.Request) -> authn.UserInfo:
        """Who sends the request (see `authn`), after impersonation; a bad token is a 401."""
        header = request.headers.get("Authorization")
        if header is None:
            user = authn.ANONYMOUS if request.secure else authn.UNSECURED
        else:
            scheme, _, token = header.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise ApiError(401, "Unauthorized")
            found = authn.ADMIN if token == self.cluster.token else self.tokens.authenticate(token)
            if found is None:
                raise ApiError(401, "Unauthorized")
            user = found
        wanted = authn.impersonation(request.headers)
        return user if wanted is None else self._impersonate(user, *wanted)

    def _impersonate(self, user: authn.UserInfo, name: str, groups: list[str], uid: str,
                     extras: list[tuple[str, str]]) -> authn.UserInfo:
        """The impersonation filter: `impersonate` on each thing asked for, checked as `user`."""
        if not name:
            raise ApiError(500, "Internal error occurred: requested impersonation without impersonating a user")
        sa = authn.split_service_account(name)
        checks = [Attributes(user, "impersonate", True, "", sa[0], "", "v1", "serviceaccounts", "", sa[1])
                  if sa else Attributes(user, "impersonate", True, "", "", "", "v1", "users", "", name)]
        checks += [Attributes(user, "impersonate", True, "", "", "", "v1", "groups", "", g) for g in groups]
        if uid:
            checks.append(Attributes(user, "impersonate", True, "", "", "authentication.k8s.io", "v1",
                                          "uids", "", uid))
        checks += [Attributes(user, "impersonate", True, "", "", "authentication.k8s.io", "v1",
                                   "userextras", key, value) for key, value in extras]
        for a in checks:
            self.authorizer.check(a)
        return authn.impersonated_user(name, groups, uid, extras)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        # authorization comes before routing: a request that may not see a path gets a
        # 403 whether or not something is there
        self.authorizer.check(request_attributes(request[USER], request.method, request.path,
                                                      request.query))
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json({"paths": sorted(["/api", "/api/v1", "/apis", "/version", "/healthz", "/livez",
                                           "/readyz"] + [f"/apis/{g}" for g in _groups()])})
        head = parts[0]
        if head in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok", content_type="text/plain")
        if head == "version" and len(parts) == 1:
            return _json(_version())
        if head == "openapi" and len(parts) >= 2 and parts[1] == "v3":
            return self._openapi_v3(request, parts[2:])
        if head in ("openapi", "swagger.json"):  # v2 is not served; kubectl uses v3
            raise _path_not_found(request.path)
        if head == "api":
            return await self._api(request, None, parts[1:])
        if head == "apis":
            return await self._api(request, parts[1] if len(parts) > 1 else "", parts[2:])
        raise _path_not_found(request.path)

    def _openapi_v3(self, request: web.Request, rest: list[str]) -> web.Response:
        if not rest:
            return _json(openapi.v3_root(ALL))
        if rest[0] == "api" and len(rest) == 2:
            doc = openapi.v3_document("", rest[1], ALL)
        elif rest[0] == "apis" and len(rest) == 3:
            doc = openapi.v3_document(rest[1], rest[2], ALL)
        else:
            doc = None
        if doc is None:
            raise _path_not_found(request.path)
        return _json(doc)

    async def _api(self, request: web.Request, group: str | None, rest: list[str]) -> web.StreamResponse:
        """`/api[/v1/...]` (group None) or `/apis[/group[/version/...]]`."""
        if group == "":
            return _json(discovery_groups())
        if group is None and not rest:
            return _json(discovery_core_versions(request))
        if group is not None and not rest:
            if group not in _groups():
                raise _path_not_found(request.path)
            return _json(discovery_group(group))
        version, parts = rest[0], rest[1:]
        if version != "v1" or (group is not None and group not in _groups()):
            raise _path_not_found(request.path)
        if not parts:
            if request.method != "GET":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return _json(discovery_resources(group or ""))
        target = parse_target(group or "", parts, request.path)
        handler = self._handler_for(request.method, target)
        return await handler(request, target)

    def _handler_for(self, method: str, t: Target) -> Handler:
        if not t.rtype.stored:
            if t.name is not None:
                raise _path_not_found(f"/{t.rtype.plural}/{t.name}")
            return _only(method, "POST", self._review)
        if t.subresource == "token":
            return _only(method, "POST", self._token_request)
        if t.subresource == "log":
            return _only(method, "GET", self.logs.serve)
        if t.subresource in ("exec", "attach"):  # websocket clients GET, kubectl's SPDY POSTed
            if method not in ("GET", "POST"):
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return self.exec.serve
        if t.subresource == "binding":
            return _only(method, "POST", self.writes.bind)
        if t.subresource == "eviction":
            return _only(method, "POST", self.writes.evict)
        if t.subresource == "scale":
            if method not in ("GET", "PUT", "PATCH"):
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return self.writes.scale
        if t.watch_path:
            return _only(method, "GET", self._watch)
        if t.name is None:
            table: dict[str, Handler] = {"GET": self._list, "POST": self.writes.create,
                                         "DELETE": self.writes.delete_collection}
            if method == "POST" and t.rtype.namespaced and t.namespace is None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
        else:
            table = {"GET": self._get, "PUT": self.writes.replace, "PATCH": self.writes.patch,
                     "DELETE": self.writes.delete}
            if t.subresource == "status":
                table.pop("DELETE")
        handler = table.get(method)
        if handler is None:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return handler

    # --- reading ---------------------------------------------------------------------

    async def _get(self, request: web.Request, t: Target) -> web.StreamResponse:
        if request.query.get("watch") in _TRUE:
            return await self._watch(request, t)
        obj = self.store.get(t.rtype, t.namespace, t.name)
        if tables.wants_table(request.headers.get("Accept", "")):
            return _json(tables.table(t.rtype.kind, [obj], obj["metadata"].get("resourceVersion", ""),
                                      request.query.get("includeObject", "PartialObjectMetadata")))
        return _json(obj)

    async def _list(self, request: web.Request, t: Target) -> web.StreamResponse:
        if request.query.get("watch") in _TRUE:
            return await self._watch(request, t)
        flt = _filter(request, t)
        q = request.query
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if tables.wants_table(request.headers.get("Accept", "")) or q.get("limit") or q.get("continue"):
            items, rv = self.store.list(flt)
            items, token, remaining = _paginate(t.rtype, items, rv, q)
            if tables.wants_table(request.headers.get("Accept", "")):
                return _json(tables.table(t.rtype.kind, items, rv, q.get("includeObject", "PartialObjectMetadata"),
                                          token))
            if token:
                meta["continue"] = token
                meta["remainingItemCount"] = remaining
            listing = self.listings.page(t.rtype, items)
        else:
            # an empty selector is no selector: KubeSpawner's reflector sends `fieldSelector=`
            listing = self.listings.whole(flt, (t.namespace, q.get("labelSelector") or None,
                                                q.get("fieldSelector") or None))
        return await self.listings.write(request, t.rtype, meta, listing)

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        flt = _filter(request, t)
        timeout = _int_param(q, "timeoutSeconds")
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        encode = None
        if tables.wants_table(request.headers.get("Accept", "")):
            include = q.get("includeObject", "PartialObjectMetadata")
            encode = lambda _type, obj: tables.table(  # noqa: E731
                t.rtype.kind, [obj], obj["metadata"].get("resourceVersion", ""), include)
        stream = WatchStream(
            self.store, flt, q.get("resourceVersion"),
            timeout=float(timeout) if timeout is not None and timeout > 0
            else MIN_WATCH_TIMEOUT * (1 + random.random()),
            bookmark_interval=float(self.cluster.scenario.bookmark_interval) if bookmarks else None,
            send_initial_events=q.get("sendInitialEvents") in _TRUE,
            encode=encode,
        )
        self._streams.add(stream)
        try:
            return await stream.run(request)
        finally:
            self._streams.discard(stream)

    # --- reviews and tokens ------------------------------------------------------------

    async def _review(self, request: web.Request, t: Target) -> web.StreamResponse:
        """The access and identity reviews: answered, never stored."""
        body = await _body(request)
        if t.rtype.kind == "TokenReview":
            return _json(self._token_review(body), status=201)
        return _json(review(self.authorizer, t.rtype.kind, request[USER], body, t.namespace), status=201)

    def _token_review(self, body: Any) -> dict[str, Any]:
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        token = (spec or {}).get("token") or ""
        user = authn.ADMIN if token and token == self.cluster.token else self.tokens.authenticate(token)
        status: dict[str, Any] = {"authenticated": True, "user": user.as_json(),
                                  "audiences": list(serviceaccounts.API_AUDIENCES)} if user else {}
        return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec or {}, "status": status}

    async def _token_request(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await _body(request)
        return _json(serviceaccounts.token_request(self.tokens, self.store, t.namespace or "", t.name or "", body),
                     status=201)
