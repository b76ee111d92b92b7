"""The API server's side of HTTP: reading a request's sender, body, query, selection and
delete options, and writing JSON, Status and paged list responses (gzipped for clients
that ask)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import yaml
from aiohttp import web

from ..rbac import authn
from . import compression, protobuf
from .. import errors
from .discovery import Target
from ..errors import ApiError
from ..resources import ResourceType
from ..selectors import selector_string
from ..store import Filter, Obj, _key
from .watch import dumps

_PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")

USER = web.RequestKey("user", authn.UserInfo)  # who sends the request, after impersonation


async def _body(request: web.Request, as_json: bool = False) -> Any:
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
    if content_type == "application/cbor":  # client-go then falls back to JSON
        raise ApiError(415, "the body of the request was in an unknown format - accepted media types "
                            "include: application/json, application/yaml")
    raw = await request.read()
    if content_type == protobuf.CONTENT_TYPE:  # kubectl's typed clients (create namespace...)
        return protobuf.decode(raw)
    if not raw.strip():
        return None
    try:
        if content_type in ("application/yaml", "application/x-yaml") and not as_json:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise errors.bad_request(f"error decoding request body: {e}") from None


async def _delete_options(request: web.Request) -> dict[str, Any]:
    body = await _body(request)
    options: dict[str, Any] = body if isinstance(body, dict) else {}
    grace = _int_param(request.query, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if options.get("gracePeriodSeconds") is not None:
        if not isinstance(options["gracePeriodSeconds"], int):
            raise errors.bad_request("gracePeriodSeconds must be an integer")
        options["gracePeriodSeconds"] = max(0, options["gracePeriodSeconds"])
    if request.query.get("dryRun"):
        options["dryRun"] = request.query.getall("dryRun")
    if request.query.get("propagationPolicy"):
        options["propagationPolicy"] = request.query["propagationPolicy"]
    if options.get("orphanDependents") is not None and not options.get("propagationPolicy"):
        options["propagationPolicy"] = "Orphan" if options["orphanDependents"] else "Background"
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in _PROPAGATION_POLICIES:
        raise errors.invalid("DeleteOptions", "", [{
            "reason": "FieldValueNotSupported", "field": "propagationPolicy",
            "message": f"Unsupported value: {json.dumps(policy)}: supported values: "
                       + ", ".join(f'"{p}"' for p in _PROPAGATION_POLICIES + ("nil",))}], "meta.k8s.io")
    return options


def _filter(request: web.Request, t: Target) -> Filter:
    fields = request.query.get("fieldSelector") or ""
    if t.name:  # watching one object: the client-go way is a name field selector
        fields = ",".join(f for f in (fields, f"metadata.name={t.name}") if f)
    return Filter(t.rtype, t.namespace, request.query.get("labelSelector"), fields)


def _dry_run(request: web.Request, options: dict[str, Any] | None = None) -> bool:
    values = list(request.query.getall("dryRun", [])) + list((options or {}).get("dryRun") or [])
    for v in values:
        if v != "All":
            raise errors.bad_request(f'Invalid dry run value: "{v}" (supported values: "All")')
    return bool(values)


def _field_validation(request: web.Request) -> str:
    value = request.query.get("fieldValidation", "Warn")
    if value not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(f"fieldValidation must be one of Strict, Warn, Ignore; got {value!r}")
    return value


def _int_param(query: Any, name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {value!r}") from None


def _paginate(rtype: ResourceType, items: list[Obj], rv: str, query: Any) -> tuple[list[Obj], str | None, int]:
    """`limit`/`continue`: items after the token's key, and the next token if more remain.
    Unlike etcd the pages are not one snapshot: objects changed meanwhile show their
    current state."""
    token = query.get("continue")
    if token:
        try:
            start = tuple(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise errors.bad_request("continue key is not valid: illegal base64 data") from None
        items = [o for o in items if _key(rtype, o) > start]
    limit = _int_param(query, "limit")
    if not limit or limit <= 0 or len(items) <= limit:
        return items, None, 0
    page = items[:limit]
    last = _key(rtype, page[-1])
    next_token = base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(last)}).encode()).decode()
    return page, next_token, len(items) - limit


def _client_gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


def _json(obj: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    response = web.Response(body=dumps(obj), status=status, headers=headers)
    for w in warnings or []:
        response.headers.add("Warning", f'299 - "{w.replace(chr(34), chr(39))}"')
    return response


def _compress(request: web.Request, response: web.Response) -> None:
    """Gzip a JSON body larger than the apiserver's threshold when the client asks for it."""
    body = response.body
    if (isinstance(body, bytes) and len(body) > compression.THRESHOLD
            and compression.accepts_gzip(request.headers.get("Accept-Encoding", ""))):
        response.body = compression.gzip(body)
        response.headers["Content-Encoding"] = "gzip"
        response.headers["Vary"] = "Accept-Encoding"


def _status_response(err: ApiError) -> web.Response:
    return _json(err.status(), status=err.code)


def _scale_of(obj: Obj) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                       "selector": selector_string((obj.get("spec") or {}).get("selector"))}}


def _success(code: int) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
