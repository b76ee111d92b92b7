"""The API's writes: create, replace, patch and delete (one object or a collection), the
`scale` subresource, and a pod's binding and eviction. Each validates, defaults and admits
(see `admission/`), refuses an RBAC object that escalates (see `rbac.escalation`), and
writes to the store unless the request is a dry run."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .. import errors
from . import openapi, patch
from ..admission.pipeline import admit_update
from ..admission.schema import decode
from .discovery import Target
from ..errors import ApiError
from .httpio import USER, _body, _delete_options, _dry_run, _field_validation, _filter, _json, _scale_of, _success
from ..rbac.authorizer import RBAC_KINDS, Authorizer
from ..rbac.escalation import confirm_no_escalation
from ..store import Obj
from ..api.timestamps import rfc3339

_RETURNS_DELETED_OBJECT = ("Pod", "Namespace")  # the others answer a Status on deletion


class Writes:
    """`Writes(cluster, authorizer)`: the handlers, `(request, target) -> response`, of the
    requests that change objects."""

    def __init__(self, cluster: Any, authorizer: Authorizer) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.authorizer = authorizer

    async def create(self, request: web.Request, t: Target) -> web.StreamResponse:
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

    async def replace(self, request: web.Request, t: Target) -> web.StreamResponse:
        body, warnings, schema_valid = decode(t.rtype, await _body(request), _field_validation(request))
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, t.name):
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on "
                                     f"the URL ({t.name})")
        if t.rtype.namespaced and meta.get("namespace") not in (None, t.namespace):
            raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                     "sent on the request")
        return self._update(request, t, body, warnings, schema_valid)

    async def patch(self, request: web.Request, t: Target) -> web.StreamResponse:
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

    async def delete(self, request: web.Request, t: Target) -> web.StreamResponse:
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

    async def delete_collection(self, request: web.Request, t: Target) -> web.StreamResponse:
        options = await _delete_options(request)
        items, rv = self.store.list(_filter(request, t))
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

    async def scale(self, request: web.Request, t: Target) -> web.StreamResponse:
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

    async def bind(self, request: web.Request, t: Target) -> web.StreamResponse:
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

    async def evict(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await _body(request) or {}
        options = body.get("deleteOptions") or {}
        self.store.get(t.rtype, t.namespace, t.name)
        if not _dry_run(request, options):
            self.store.delete(t.rtype, t.namespace, t.name,
                              grace_period_seconds=options.get("gracePeriodSeconds"),
                              uid=(options.get("preconditions") or {}).get("uid"))
        return _json(_success(201), status=201)
