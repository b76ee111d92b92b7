"""What a request's path names (`Target`, `parse_target`: the resource, namespace, name and
subresource, or the apiserver's 404) and the discovery documents the API server serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web

from . import openapi
from ..errors import ApiError
from ..resources import ALL, ResourceType, lookup


@dataclass
class Target:
    """What a resource path names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool = False  # the legacy /watch/ prefix


Handler = Callable[[web.Request, Target], Awaitable[web.StreamResponse]]


def parse_target(group: str, parts: list[str], path: str) -> Target:
    """`[watch/][namespaces/NS/]PLURAL[/NAME[/SUB]]` after the group version."""
    watch_path = False
    if parts and parts[0] == "watch":
        watch_path, parts = True, parts[1:]
    namespace = None
    # /namespaces/NS/PLURAL... addresses namespaced objects; /namespaces/NAME[/status]
    # addresses the Namespace itself
    if len(parts) >= 3 and parts[0] == "namespaces" and lookup(group, parts[2]) is not None:
        namespace, parts = parts[1], parts[2:]
    if not parts or len(parts) > 3:
        raise _path_not_found(path)
    rtype = lookup(group, parts[0])
    if rtype is None:
        raise _path_not_found(path)
    if namespace is not None and not rtype.namespaced:
        raise _path_not_found(path)
    name = parts[1] if len(parts) > 1 else None
    sub = parts[2] if len(parts) > 2 else None
    if sub is not None and sub not in _subresources(rtype):
        raise _path_not_found(path)
    if rtype.namespaced and name is not None and namespace is None:
        raise _path_not_found(path)
    if watch_path and sub is not None:
        raise _path_not_found(path)
    return Target(rtype, namespace, name, sub, watch_path)


def _subresources(rtype: ResourceType) -> tuple[str, ...]:
    subs: tuple[str, ...] = ("status",) if rtype.status_subresource else ()
    if rtype.scale_subresource:
        subs += ("scale",)
    if rtype.kind == "Pod":
        subs += ("log", "binding", "eviction", "exec", "attach")
    if rtype.kind == "ServiceAccount":
        subs += ("token",)
    return subs


def _path_not_found(path: str) -> ApiError:
    return ApiError(404, "the server could not find the requested resource", details={"causes": [
        {"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}]})


def _only(method: str, allowed: str, handler: Handler) -> Handler:
    if method != allowed:
        raise ApiError(405, "the server does not allow this method on the requested resource")
    return handler


def _groups() -> list[str]:
    return sorted({r.group for r in ALL if r.group})


def _version() -> dict[str, str]:
    version = openapi.kubernetes_version()
    major, minor = version[1:].split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": version, "gitCommit": "simulated",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24",
            "compiler": "gc", "platform": "linux/amd64"}


def discovery_core_versions(request: web.Request) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]}


def discovery_group(group: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{group}/v1", "version": "v1"}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}


def discovery_groups() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{k: v for k, v in discovery_group(g).items() if k not in ("kind", "apiVersion")}
                       for g in _groups()]}


def discovery_resources(group: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for r in ALL:
        if r.group != group:
            continue
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": list(r.verbs)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        if r.status_subresource:
            resources.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": ["get", "patch", "update"]})
        if r.scale_subresource:
            resources.append({"name": f"{r.plural}/scale", "singularName": "", "namespaced": r.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
        if r.kind == "Pod":
            resources += [
                {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                 "verbs": ["create"]},
                {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                 "version": "v1", "kind": "Eviction", "verbs": ["create"]},
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
                {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
                 "verbs": ["create", "get"]},
                {"name": "pods/attach", "singularName": "", "namespaced": True, "kind": "PodAttachOptions",
                 "verbs": ["create", "get"]},
            ]
        if r.kind == "ServiceAccount":
            resources.append({"name": "serviceaccounts/token", "singularName": "", "namespaced": True,
                              "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                              "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1" if group else "v1",
            "resources": resources}
