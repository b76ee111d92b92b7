"""PATCH bodies: JSON merge patch, JSON patch and strategic merge patch.

Strategic merge patch follows apimachinery's rules where clients rely on them: maps
merge, `null` deletes a key, lists whose schema has `x-kubernetes-patch-strategy: merge`
merge by their `x-kubernetes-patch-merge-key` (containers by name, volumes by name...) or,
for lists of scalars (finalizers), as a union; other lists are replaced. The directives
`$patch: replace|delete|merge`, `$retainKeys`, `$deleteFromPrimitiveList/<field>` are
honoured and `$setElementOrder/<field>` is accepted and ignored (order is not kept).
Server-side apply (`application/apply-patch+yaml`) is not supported (415).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from .. import errors
from . import openapi

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
SUPPORTED = (JSON_PATCH, MERGE, STRATEGIC)


def apply(content_type: str, current: dict[str, Any], patch: Any, schema: dict[str, Any] | None) -> dict[str, Any]:
    """The patched copy of `current`; raises ApiError 400/415/422 like the apiserver."""
    if content_type == JSON_PATCH:
        return _json_patch(current, patch)
    if content_type == MERGE:
        if not isinstance(patch, dict):
            raise errors.bad_request("json: cannot unmarshal into Go value of type map[string]interface {}")
        return merge_patch(current, patch)
    if content_type == STRATEGIC:
        if not isinstance(patch, dict):
            raise errors.bad_request("json: cannot unmarshal into Go value of type map[string]interface {}")
        return strategic_merge(current, patch, schema)
    raise errors.ApiError(
        415, f"the body of the request was in an unknown format - accepted media types include: "
             f"{', '.join(SUPPORTED)}")


def _json_patch(current: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, list):
        raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        return jsonpatch.JsonPatch(patch).apply(current, in_place=False)
    except jsonpatch.JsonPatchTestFailed as e:
        raise errors.ApiError(422, f"the server rejected our request due to an error in our request: {e}") from None
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as e:
        raise errors.ApiError(422, f"the server rejected our request due to an error in our request: {e}") from None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_DELETE = object()  # a map patched with `$patch: delete`


def strategic_merge(current: dict[str, Any], patch: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    merged = _merge_map(current, patch, schema)
    return {} if merged is _DELETE else merged


def _merge_map(original: Any, patch: dict[str, Any], schema: dict[str, Any] | None) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [x for x in result[field] if x not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = openapi.child(schema, key)
        if isinstance(value, dict):
            merged = _merge_map(result.get(key), value, sub)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and "merge" in str((sub or {}).get("x-kubernetes-patch-strategy", "")):
            result[key] = _merge_list(result.get(key), value, sub)
        else:
            result[key] = _strip(value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: Any, patch: list[Any], schema: dict[str, Any] | None) -> list[Any]:
    original = copy.deepcopy(original) if isinstance(original, list) else []
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    key = (schema or {}).get("x-kubernetes-patch-merge-key")
    if not key:  # a list of scalars merged as a set, keeping the original order first
        return original + [_strip(p) for p in patch if p not in original]
    item_schema = openapi.items(schema)
    for item in patch:
        if not isinstance(item, dict):
            continue
        index = next((i for i, o in enumerate(original)
                      if isinstance(o, dict) and o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                original.pop(index)
            continue
        if index is None:
            original.append(_strip(item))
        else:
            merged = _merge_map(original[index], item, item_schema)
            if merged is _DELETE:
                original.pop(index)
            else:
                original[index] = merged
    return original


def _strip(value: Any) -> Any:
    """A patch value without directives, for where it replaces the original outright."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()
                if not (k.startswith("$") and (k in ("$patch", "$retainKeys") or "/" in k))}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return copy.deepcopy(value)
