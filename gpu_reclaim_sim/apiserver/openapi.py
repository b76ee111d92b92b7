"""The Kubernetes OpenAPI schemas, as the `kubernetes-validate` package ships them.

Admission validates objects against them (the apiserver's decoding and type checks),
and strategic merge patch reads the list merge keys (`x-kubernetes-patch-merge-key`)
from them, as the real server reads them from its Go types. Schemas are loaded once and
validators are cached per kind, so validating a pod costs well under a millisecond.
"""

from __future__ import annotations

import functools
import json
from importlib import resources as importlib_resources
from typing import Any, Callable, Iterator

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

Schema = dict[str, Any]


@functools.lru_cache(maxsize=1)
def schema_version() -> str:
    """The newest Kubernetes version kubernetes-validate ships, e.g. "1.37.0"."""
    return kubernetes_validate.latest_version()


def kubernetes_version() -> str:
    """The one Kubernetes version the simulated cluster claims (`/version`, the nodes'
    kubelet): the version whose schemas it validates against, e.g. "v1.37.0"."""
    return f"v{schema_version()}"


def _schema_dir() -> Any:
    return importlib_resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{schema_version()}-local-strict")


@functools.lru_cache(maxsize=1)
def _definitions_document() -> Schema:
    return _load("_definitions.json")


def definitions() -> dict[str, Schema]:
    """Every type's schema by its OpenAPI name (`io.k8s.api.core.v1.Pod`)."""
    return _definitions_document()["$defs"]


def _load(filename: str) -> Schema:
    return json.loads(_schema_dir().joinpath(filename).read_text())


def _file_for(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    suffix = f"{group.split('.')[0]}-{version}" if group else version
    return f"{kind.lower()}-{suffix}.json"


@functools.lru_cache(maxsize=64)
def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """A strict (unknown fields refused) validator for one kind, or None if none ships."""
    try:
        schema = _load(_file_for(api_version, kind))
    except FileNotFoundError:
        return None
    registry = Resource.from_contents(schema) @ Registry()
    # one parsed copy of the shared definitions for every kind (about 4 MB each otherwise)
    registry = Resource.from_contents(_definitions_document()) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=64)
def root(api_version: str, kind: str) -> Schema | None:
    """The top-level schema of a kind (for walking it with `child`)."""
    v = validator(api_version, kind)
    return v.schema if v is not None and isinstance(v.schema, dict) else None


def resolve(node: Schema | None) -> Schema | None:
    """Follow `$ref` into the shared definitions."""
    seen = 0
    while node is not None and "$ref" in node and seen < 20:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = definitions().get(name)
        seen += 1
    return node


def child(node: Schema | None, key: str) -> Schema | None:
    """The (unresolved) schema of property `key`, which carries the patch extensions."""
    node = resolve(node)
    if node is None:
        return None
    props = node.get("properties") or {}
    if key in props:
        return props[key]
    extra = node.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def items(node: Schema | None) -> Schema | None:
    node = resolve(node)
    return node.get("items") if node else None


def errors(api_version: str, kind: str, obj: Any) -> Iterator[jsonschema.ValidationError]:
    v = validator(api_version, kind)
    if v is None:
        return iter(())
    return v.iter_errors(obj)


def valid(api_version: str, kind: str, obj: Any) -> bool:
    """Whether `errors` would find nothing, in a tenth of its time: True only where the
    validator finds no error; False where it would, or where the check cannot tell (a
    keyword it does not know), and then `errors` says what is wrong."""
    return _kind_check(api_version, kind)(obj)


# --- the fast check --------------------------------------------------------------------
#
# jsonschema resolves every `$ref` and builds a validator per subschema on every call:
# ~2 ms for a KubeSpawner pod, most of an API create. The schemas use a few keywords
# (type, properties, additionalProperties, items, required, enum, oneOf, $ref; format is an
# annotation there), which compile to closures once per schema node.

Check = Callable[[Any], bool]
_ANNOTATIONS = frozenset({"description", "format", "$schema", "$id", "default", "title"})
_NUMBER = (int, float)


@functools.lru_cache(maxsize=64)
def _kind_check(api_version: str, kind: str) -> Check:
    schema = root(api_version, kind)
    return _compile(schema, {}) if schema is not None else (lambda obj: True)


def _type_check(names: tuple[str, ...]) -> Check:
    """jsonschema's draft 2020-12 type checker, for one `type` keyword."""
    simple = tuple(t for n, t in (("string", str), ("object", dict), ("array", list), ("boolean", bool))
                   if n in names)
    null, number, integer = "null" in names, "number" in names, "integer" in names

    def check(v: Any) -> bool:
        if v is None:
            return null
        if isinstance(v, simple):
            return True
        if isinstance(v, bool):  # not a number
            return False
        if number and isinstance(v, _NUMBER):
            return True
        return integer and (isinstance(v, int) or isinstance(v, float) and v.is_integer())

    return check


def _enum_check(allowed: frozenset[str]) -> Check:
    return lambda v: isinstance(v, str) and v in allowed


def _required_check(needed: tuple[str, ...]) -> Check:
    return lambda v: not isinstance(v, dict) or all(k in v for k in needed)


def _items_check(item: Check) -> Check:
    return lambda v: not isinstance(v, list) or all(item(x) for x in v)


def _one_of_check(options: list[Check]) -> Check:
    return lambda v: sum(1 for o in options if o(v)) == 1


def _compile(node: Any, memo: dict[int, Check]) -> Check:
    if node is True or node == {}:
        return lambda v: True
    if not isinstance(node, dict):
        return lambda v: False
    compiled = memo.get(id(node))
    if compiled is not None:
        return compiled
    cell: list[Check] = []
    memo[id(node)] = lambda v: cell[0](v)  # a recursive $ref finds this while compiling
    checks: list[Check] = []
    for keyword, value in node.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-") or keyword in ("properties", "additionalProperties"):
            continue
        if keyword == "$ref":
            target = definitions().get(value.rsplit("/", 1)[-1])
            checks.append(_compile(target, memo) if target is not None else (lambda v: False))
        elif keyword == "type":
            checks.append(_type_check((value,) if isinstance(value, str) else tuple(value)))
        elif keyword == "enum" and all(isinstance(e, str) for e in value):
            checks.append(_enum_check(frozenset(value)))
        elif keyword == "required":
            checks.append(_required_check(tuple(value)))
        elif keyword == "items":
            checks.append(_items_check(_compile(value, memo)))
        elif keyword == "oneOf":
            checks.append(_one_of_check([_compile(o, memo) for o in value]))
        else:  # a keyword not compiled here: leave the verdict to jsonschema
            checks.append(lambda v: False)
    if "properties" in node or "additionalProperties" in node:
        checks.append(_object_check(node, memo))
    check = checks[0] if len(checks) == 1 else (lambda v: all(c(v) for c in checks))
    cell.append(check)
    memo[id(node)] = check
    return check


def _object_check(node: Schema, memo: dict[int, Check]) -> Check:
    props = {k: _compile(s, memo) for k, s in (node.get("properties") or {}).items()}
    extra = node.get("additionalProperties", True)
    other = None if extra is False else _compile(extra, memo)

    def check(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for key, value in v.items():
            c = props.get(key, other)
            if c is None or not c(value):
                return False
        return True

    return check


# --- the /openapi/v3 documents ---------------------------------------------------------
#
# kubectl refuses `create -f`/`apply` ("failed to download openapi") unless it can learn
# whether the server validates fields itself. It reads that from the PATCH operation of
# each kind in /openapi/v3: with a `fieldValidation` query parameter there, kubectl skips
# client-side validation and sends `fieldValidation=Strict`, leaving validation to us.
# The documents carry only paths, not the component schemas (so `kubectl explain` does
# not work), and announce no strategic merge patch body, so `kubectl apply` computes its
# patches from the types compiled into it.

def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def v3_root(resource_types: list[Any]) -> dict[str, Any]:
    gvs = sorted({(r.group, r.version) for r in resource_types})
    return {"paths": {_gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={schema_version()}"}
                      for g, v in gvs}}


def v3_document(group: str, version: str, resource_types: list[Any]) -> dict[str, Any] | None:
    types = [r for r in resource_types if (r.group, r.version) == (group, version)]
    if not types:
        return None
    paths: dict[str, Any] = {}
    for r in types:
        gvk = {"group": group, "version": version, "kind": r.kind}
        base = f"/{_gv_path(group, version)}" + ("/namespaces/{namespace}" if r.namespaced else "")
        params = [{"name": p, "in": "query", "schema": {"type": "string"}}
                  for p in ("dryRun", "fieldManager", "fieldValidation")]
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": params,
              "responses": {"200": {"description": "OK"}}}
        paths[f"{base}/{r.plural}"] = {"post": {**op, "operationId": f"create{r.kind}"}}
        paths[f"{base}/{r.plural}/{{name}}"] = {
            "put": {**op, "operationId": f"replace{r.kind}"},
            "patch": {**op, "operationId": f"patch{r.kind}"},
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (simulated)", "version": f"v{schema_version()}"},
            "paths": paths, "components": {"schemas": {}}}
