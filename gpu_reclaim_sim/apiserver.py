"""The simulated cluster's API server: the Kubernetes REST/JSON API over aiohttp.

Unmodified kubectl, the official `kubernetes` client, kubernetes_asyncio and KubeSpawner
talk to it through an ordinary kubeconfig (server URL + bearer token). It serves
discovery, CRUD with the apiserver's status codes and `Status` errors, list paging and
selectors, watches (see `watch.py`), PATCH in the three JSON flavours (see `patch.py`),
server-side Table printing for `kubectl get` (see `tables.py`), pod logs, binding and
eviction, and gzip of large responses for clients that ask (see `compression.py`).
Validation, defaulting and admission live in `admission/`; what a path names and the
discovery documents in `discovery.py`, reading requests and writing responses in
`httpio.py`, which container's log a request reads in `podlogs.py`.

Not served: protobuf (clients fall back to JSON), aggregated discovery (clients fall back
to the legacy discovery documents), OpenAPI v2 and the schemas in OpenAPI v3 (v3 carries
just enough for kubectl to leave validation to the server; see `openapi.py`),
server-side apply."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from aiohttp import web

from . import authn, certificates, compression, errors, kubernetes_service, openapi, patch, serviceaccounts, tables
from .admission.pipeline import admit_update
from .admission.schema import decode
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
from .errors import ApiError
from .httpio import (
    _ITEMS_CLOSE,
    _ITEMS_OPEN,
    _LIST_CHUNK,
    _body,
    _client_gone,
    _compress,
    _delete_options,
    _dry_run,
    _field_validation,
    _int_param,
    _json,
    _key,
    _paginate,
    _plain_pieces,
    _scale_of,
    _status_response,
    _success,
)
from .podlogs import _explain_missing_log, _log_container, _read_log, _tail, _terminated
from .rbac.authorizer import RBAC_KINDS, TRUE, Attributes, Authorizer, request_attributes
from .rbac.defaults import RoleAggregator, bootstrap
from .rbac.escalation import confirm_no_escalation
from .rbac.reviews import review
from .resources import ALL, BY_KIND
from .store import Filter, Key, Obj
from .timestamps import rfc3339
from .watch import WatchStream, dumps

log = logging.getLogger("gpu_reclaim_sim.apiserver")


MIN_WATCH_TIMEOUT = 300.0  # a watch without timeoutSeconds lasts 5-10 min (jittered)


LOG_POLL_INTERVAL = 0.2


_TRUE = TRUE


_RETURNS_DELETED_OBJECT = ("Pod", "Namespace")  # the others answer a Status on deletion


USER = web.RequestKey("user", authn.UserInfo)  # who sends the request, after impersonation


_KEPT_LISTINGS = 16


RECOMPRESS_AFTER = 2.0  # seconds: how soon a list fetched gzipped is compressed again after a change


@dataclass
class _Listing:
    """A list's items as of its resource's `revision` (the resourceVersion of its last
    change), kept for the next list of the same selection (`filter`; None for a page):
    their keys and JSON, and their compressed form once a client has asked for it."""

    filter: Filter | None
    revision: int
    keys: list[Key]
    items: list[bytes]
    compressor: compression.ListCompressor
    gzipped: compression.Deflated | None = None

    @property
    def size(self) -> int:
        """The length of the comma-joined items and the list's closing `]}`."""
        return sum(map(len, self.items)) + max(len(self.items) - 1, 0) + len(_ITEMS_CLOSE)


class ApiServer:
    """`ApiServer(cluster)`; `await start()`, `url`, `await stop()`.

    It always serves HTTPS (the secure port, `secure_url`) with a certificate made at
    construction (`ca_pem`), where pods reach it through the `kubernetes` Service
    (sim.kubernetes_service). With `tls=False` (the
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
        self._listings: dict[tuple[Any, ...], _Listing] = {}  # see _listing
        self._recompressing: asyncio.Task[None] | None = None
        self.recompress_after = RECOMPRESS_AFTER
        self._stopping = asyncio.Event()
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
        self._recompressing = asyncio.create_task(self._keep_lists_compressed())
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
        if self._recompressing is not None:
            self._recompressing.cancel()
            self._recompressing = None
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
            return _only(method, "GET", self._logs)
        if t.subresource == "binding":
            return _only(method, "POST", self._bind)
        if t.subresource == "eviction":
            return _only(method, "POST", self._evict)
        if t.subresource == "scale":
            if method not in ("GET", "PUT", "PATCH"):
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return self._scale
        if t.watch_path:
            return _only(method, "GET", self._watch)
        if t.name is None:
            table: dict[str, Handler] = {"GET": self._list, "POST": self._create,
                                         "DELETE": self._delete_collection}
            if method == "POST" and t.rtype.namespaced and t.namespace is None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
        else:
            table = {"GET": self._get, "PUT": self._replace, "PATCH": self._patch, "DELETE": self._delete}
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

    def _filter(self, request: web.Request, t: Target) -> Filter:
        fields = request.query.get("fieldSelector") or ""
        if t.name:  # watching one object: the client-go way is a name field selector
            fields = ",".join(f for f in (fields, f"metadata.name={t.name}") if f)
        return Filter(t.rtype, t.namespace, request.query.get("labelSelector"), fields)

    async def _list(self, request: web.Request, t: Target) -> web.StreamResponse:
        if request.query.get("watch") in _TRUE:
            return await self._watch(request, t)
        flt = self._filter(request, t)
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
            listing = _Listing(None, 0, [_key(t.rtype, o) for o in items],
                               [self.store.encoded(t.rtype, o) for o in items], compression.ListCompressor())
        else:
            listing = self._listing(flt, (t.namespace, q.get("labelSelector"), q.get("fieldSelector")))
        head = dumps({"kind": t.rtype.list_kind, "apiVersion": t.rtype.api_version, "metadata": meta})[:-1]
        return await self._write_list(request, head + _ITEMS_OPEN, listing)

    def _listing(self, flt: Filter, selection: tuple[Any, ...]) -> _Listing:
        """The items of a whole list, kept until an object of the kind changes, so that
        listing an unchanged collection again costs next to nothing (the store keeps each
        stored version's JSON), and with them what compressed them, which a list after a
        change reuses for the runs of items that did not change."""
        key = (flt.rtype.plural, *selection)
        revision = self.store.revisions.get(flt.rtype.plural, 0)
        kept = self._listings.get(key)
        if kept is not None and kept.revision == revision:
            return kept
        keys, items = self.store.list_encoded(flt)
        if kept is None and len(self._listings) >= _KEPT_LISTINGS:
            self._listings.clear()
        listing = self._listings[key] = _Listing(flt, revision, keys, items,
                                                 kept.compressor if kept else compression.ListCompressor())
        return listing

    @staticmethod
    async def _gzipped(listing: _Listing) -> compression.Deflated:
        if listing.gzipped is None:
            listing.gzipped = await listing.compressor.items([k[1] for k in listing.keys], listing.items)
        return listing.gzipped

    async def _keep_lists_compressed(self) -> None:
        """Compress again, off the request path, the lists clients have fetched gzipped, a
        moment after their objects changed (at most every `recompress_after` seconds), so
        that the first list after a change finds all but the latest changes compressed."""
        while True:
            await asyncio.sleep(self.recompress_after)
            for (plural, *selection), kept in list(self._listings.items()):
                if kept.filter is None or kept.gzipped is None or kept.revision == self.store.revisions.get(plural, 0):
                    continue
                try:
                    await self._gzipped(self._listing(kept.filter, tuple(selection)))
                except Exception:  # the next list compresses it, and says what failed
                    log.exception("compressing the list of %s %s", plural, selection)

    async def _write_list(self, request: web.Request, head: bytes, listing: _Listing) -> web.StreamResponse:
        """`head` then the listing's items and the list's end, gzipped when the client
        asks for it and the body is larger than the apiserver's threshold (see
        `compression`). The body is written in pieces, not copied into one more buffer,
        each waiting for the client to take it, so that the socket (and TLS) buffers
        stay small."""
        response = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Cache-Control": "no-cache, private"})
        size = len(head) + listing.size
        pieces: Iterator[bytes] | list[bytes]
        if size > compression.THRESHOLD and compression.accepts_gzip(request.headers.get("Accept-Encoding", "")):
            pieces = compression.gzip_pieces(head, await self._gzipped(listing))
            size = sum(map(len, pieces))
            response.headers["Content-Encoding"] = "gzip"
            response.headers["Vary"] = "Accept-Encoding"
        else:
            pieces = _plain_pieces(head, listing.items)
        response.content_length = size
        await response.prepare(request)
        for piece in pieces:
            view = memoryview(piece)
            for start in range(0, len(view), _LIST_CHUNK):
                await response.write(view[start:start + _LIST_CHUNK])
        await response.write_eof()
        return response

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        flt = self._filter(request, t)
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

    # --- writing ---------------------------------------------------------------------

    async def _create(self, request: web.Request, t: Target) -> web.StreamResponse:
        body, warnings, schema_valid = decode(t.rtype, await _body(request), _field_validation(request))
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if t.rtype.namespaced and meta.get("namespace") and meta["namespace"] != t.namespace:
            raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                     "sent on the request")
        obj = self.cluster.create(t.rtype, body, t.namespace, user=request[USER], schema_valid=schema_valid,
                                  dry_run=_dry_run(request))
        return _json(obj, status=201, warnings=warnings)

    async def _replace(self, request: web.Request, t: Target) -> web.StreamResponse:
        body, warnings, schema_valid = decode(t.rtype, await _body(request), _field_validation(request))
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, t.name):
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on "
                                     f"the URL ({t.name})")
        if t.rtype.namespaced and meta.get("namespace") not in (None, t.namespace):
            raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                     "sent on the request")
        return self._update(request, t, body, warnings, schema_valid)

    async def _patch(self, request: web.Request, t: Target) -> web.StreamResponse:
        current = self.store.get(t.rtype, t.namespace, t.name)
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type not in patch.SUPPORTED:
            raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                                f"include: {', '.join(patch.SUPPORTED)}")
        raw = await _body(request, as_json=True)
        patched = patch.apply(content_type, current, raw,
                              openapi.root(t.rtype.api_version, t.rtype.kind))
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise errors.bad_request("the patch does not leave an object with metadata")
        if patched["metadata"].get("name") != t.name:
            raise ApiError(422, f'{t.rtype.kind} "{t.name}" is invalid: metadata.name: Invalid value: '
                                f'{json.dumps(patched["metadata"].get("name"))}: field is immutable')
        body, warnings, schema_valid = decode(t.rtype, patched, _field_validation(request))
        return self._update(request, t, body, warnings, schema_valid)

    def _update(self, request: web.Request, t: Target, body: Obj, warnings: list[str],
                schema_valid: bool) -> web.Response:
        current = self.store.get(t.rtype, t.namespace, t.name)
        new = admit_update(self.store, t.rtype, current, body, subresource=t.subresource,
                                     schema_valid=schema_valid)
        if t.rtype.kind in RBAC_KINDS:
            confirm_no_escalation(self.authorizer, request[USER], t.rtype.kind, new, current)
        if _dry_run(request):
            return _json(new, warnings=warnings)
        return _json(self.store.replace(t.rtype, new), warnings=warnings)

    async def _delete(self, request: web.Request, t: Target) -> web.StreamResponse:
        options = await _delete_options(request)
        current = self.store.get(t.rtype, t.namespace, t.name)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("resourceVersion") not in (None, current["metadata"].get("resourceVersion")):
            raise errors.conflict(t.rtype.plural, t.name or "", t.rtype.group)
        if _dry_run(request, options):
            return _json(current)
        obj, finished = self.store.delete(t.rtype, t.namespace, t.name,
                                          grace_period_seconds=options.get("gracePeriodSeconds"),
                                          uid=preconditions.get("uid"),
                                          propagation_policy=options.get("propagationPolicy"))
        if finished and t.rtype.kind not in _RETURNS_DELETED_OBJECT:
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                          "details": {"name": t.name, "group": t.rtype.group, "kind": t.rtype.plural,
                                      "uid": obj["metadata"].get("uid")}})
        return _json(obj)

    async def _delete_collection(self, request: web.Request, t: Target) -> web.StreamResponse:
        options = await _delete_options(request)
        items, rv = self.store.list(self._filter(request, t))
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                if _dry_run(request, options):
                    deleted.append(obj)
                    continue
                deleted.append(self.store.delete(t.rtype, meta.get("namespace"), meta["name"],
                                                 grace_period_seconds=options.get("gracePeriodSeconds"),
                                                 propagation_policy=options.get("propagationPolicy"))[0])
            except ApiError as e:
                if e.code != 404:  # already gone is fine
                    raise
        return _json({"kind": t.rtype.list_kind, "apiVersion": t.rtype.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})

    async def _scale(self, request: web.Request, t: Target) -> web.StreamResponse:
        """The `scale` subresource (autoscaling/v1 Scale) of Deployments, ReplicaSets and
        StatefulSets: what `kubectl scale` reads and writes."""
        obj = self.store.get(t.rtype, t.namespace, t.name)
        current = _scale_of(obj)
        if request.method == "GET":
            return _json(current)
        if request.method == "PUT":
            body = await _body(request)
        else:
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type not in patch.SUPPORTED:
                raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                                    f"include: {', '.join(patch.SUPPORTED)}")
            body = patch.apply(content_type, current, await _body(request, as_json=True),
                               openapi.root("autoscaling/v1", "Scale"))
        if not isinstance(body, dict):
            raise errors.bad_request("Scale body must be a JSON object")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise errors.conflict(t.rtype.plural, t.name or "", t.rtype.group)
        replicas = (body.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid("Scale", t.name or "", [{
                "reason": "FieldValueInvalid", "field": "spec.replicas",
                "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0"}],
                "autoscaling")
        new = {**obj, "spec": {**obj.get("spec", {}), "replicas": replicas}}
        new = admit_update(self.store, t.rtype, obj, new)
        if _dry_run(request):
            return _json(_scale_of(new))
        return _json(_scale_of(self.store.replace(t.rtype, new)))

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

    # --- pod subresources ------------------------------------------------------------

    async def _bind(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await _body(request)
        target = (body or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise errors.invalid("Binding", t.name or "", [{
                "reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}])
        pod = self.store.get(t.rtype, t.namespace, t.name)
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict("pods/binding", t.name or "")
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise ApiError(409, f'Operation cannot be fulfilled on pods/binding "{t.name}": pod {t.name} is '
                                f'already assigned to node "{assigned}"', reason="Conflict")

        def bind(o: Obj) -> None:
            o["spec"]["nodeName"] = node
            conditions = o.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": rfc3339()})

        self.store.update(t.rtype, t.namespace, t.name, bind)
        return _json(_success(201), status=201)

    async def _evict(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await _body(request) or {}
        options = body.get("deleteOptions") or {}
        self.store.get(t.rtype, t.namespace, t.name)
        if not _dry_run(request, options):
            self.store.delete(t.rtype, t.namespace, t.name,
                              grace_period_seconds=options.get("gracePeriodSeconds"),
                              uid=(options.get("preconditions") or {}).get("uid"))
        return _json(_success(201), status=201)

    async def _logs(self, request: web.Request, t: Target) -> web.StreamResponse:
        pod = self.store.get(t.rtype, t.namespace, t.name)
        container = _log_container(pod, request.query.get("container"))
        previous = request.query.get("previous") in _TRUE
        path = Path(self.cluster.pod_log_path(t.namespace, t.name, container, previous=previous))
        whole = await asyncio.to_thread(_read_log, path)
        if previous:
            if whole is None:
                raise errors.bad_request(f'previous terminated container "{container}" in pod "{t.name}" not found')
            return web.Response(body=_tail(whole, _int_param(request.query, "tailLines"),
                                           _int_param(request.query, "limitBytes")),
                                headers={"Content-Type": "text/plain"})
        if whole is None:
            _explain_missing_log(pod, container)
            whole = b""
        text = _tail(whole, _int_param(request.query, "tailLines"), _int_param(request.query, "limitBytes"))
        if request.query.get("follow") not in _TRUE:
            return web.Response(body=text, headers={"Content-Type": "text/plain"})
        return await self._follow(request, pod, container, path, text, len(whole))

    async def _follow(self, request: web.Request, pod: Obj, container: str, path: Path, first: bytes,
                      offset: int) -> web.StreamResponse:
        """Stream the log as it grows, until the container ends or the pod goes."""
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(first)
            await self._follow_file(request, response, pod, container, path, offset)
            if not _client_gone(request):
                await response.write_eof()
        except ConnectionResetError:
            log.debug("log follower went away: %s", request.path_qs)
        return response

    async def _follow_file(self, request: web.Request, response: web.StreamResponse, pod: Obj,
                           container: str, path: Path, offset: int) -> None:
        """Send what is written after `offset` (where the first read ended: nothing
        written meanwhile is lost)."""
        meta = pod["metadata"]
        while not self._stopping.is_set() and not _client_gone(request):
            data = await asyncio.to_thread(_read_log, path, offset) or b""
            offset += len(data)
            if data:
                await response.write(data)
            current = self.store.find(BY_KIND["Pod"], meta.get("namespace"), meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"] or _terminated(current, container):
                if not data:  # ended, and everything it wrote has been sent
                    return
                continue
            try:
                await asyncio.wait_for(self._stopping.wait(), LOG_POLL_INTERVAL)
            except asyncio.TimeoutError:
                pass
