"""Who may use a node's kubelet API, decided as the kubelet decides with `authentication.x509`
(the run's CA) and `authorization.mode: Webhook`: the client's certificate names the user
(CN) and its groups (O); the request maps to attributes on the node's own Node object (the
kubelet's GetRequestAttributes: verb from the method, resource `nodes`, subresource from the
path, `proxy` for containerLogs, exec, attach and portForward); a SubjectAccessReview asks
the real API server whether that user may, and the answer is cached as the kubelet caches
it (allowed 5 min, denied 30 s). A request without a certificate is 401, one not allowed
403, one the API server could not be asked about 500, in the kubelet's words. The API
server's client certificate (`system:masters`) is allowed by RBAC; any other user only as
far as RBAC grants it `nodes/proxy`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

log = logging.getLogger("gpu_reclaim_sim.nodeagent.kubeletauth")

ALLOWED_TTL_S, DENIED_TTL_S = 300.0, 30.0  # the kubelet's webhook cache
VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
SUBRESOURCES = ("stats", "metrics", "logs", "spec", "checkpoint", "configz", "healthz")  # /<it>/...; else proxy


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]


def peer_user(request: web.Request) -> User | None:
    """The user the client's certificate (verified against the run's CA by the TLS layer)
    names, or None when it sent none."""
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    if not cert:
        return None
    fields = [(k, v) for rdn in cert.get("subject", ()) for k, v in rdn]
    name = next((v for k, v in fields if k == "commonName"), "")
    return User(name, tuple(v for k, v in fields if k == "organizationName")) if name else None


def attributes(request: web.Request, node: str) -> dict[str, Any]:
    """The SubjectAccessReview's resourceAttributes for a request to node `node`'s API."""
    first = request.path.strip("/").split("/", 1)[0]
    return {"verb": VERBS.get(request.method, "get"), "resource": "nodes", "version": "v1", "group": "",
            "name": node, "subresource": first if first in SUBRESOURCES else "proxy"}


class Authorizer:
    """Asks the API server (as the node, which may create SubjectAccessReviews) and caches."""

    def __init__(self, api: k8s.ApiClient, node: str) -> None:
        self.reviews = k8s.AuthorizationV1Api(api)
        self.node = node
        self._cache: dict[tuple[User, str, str], tuple[bool, float]] = {}

    async def allowed(self, user: User, attrs: dict[str, Any]) -> bool:
        key = (user, attrs["verb"], attrs["subresource"])
        cached = self._cache.get(key)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        review: Any = {"spec": {"user": user.name, "groups": list(user.groups), "resourceAttributes": attrs}}
        answer = await self.reviews.create_subject_access_review(review)
        allowed = bool(answer.status.allowed)
        self._cache[key] = (allowed, time.monotonic() + (ALLOWED_TTL_S if allowed else DENIED_TTL_S))
        return allowed

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        user = peer_user(request)
        log.debug("%s %s from %s", request.method, request.path, user.name if user else "no one")  # (the query
        # may hold what a user typed: an exec's command)
        if user is None:
            return web.Response(status=401, text="Unauthorized")
        attrs = attributes(request, self.node)
        said = f"(user={user.name}, verb={attrs['verb']}, resource=nodes, subresource={attrs['subresource']})"
        try:
            allowed = await self.allowed(user, attrs)
        except (ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            log.warning("node %s: SubjectAccessReview for %s: %s", self.node, user.name, e)
            return web.Response(status=500, text=f"Authorization error {said}")
        if not allowed:
            return web.Response(status=403, text=f"Forbidden {said}")
        return await handler(request)
