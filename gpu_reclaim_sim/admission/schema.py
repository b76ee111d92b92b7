"""Decoding a request's object: its OpenAPI schema (types, unknown fields reported for
`fieldValidation` and pruned) and the causes the schema finds, in the apiserver's words."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from .. import errors
from ..apiserver import openapi
from ..resources import ResourceType
from ..store import Obj, copy_json
from .validation import Cause, _cause, _dedupe, _dotted, _field, _raise_invalid, _show


class Decoded(NamedTuple):
    obj: Obj
    warnings: list[str]
    # it fits the schema (unknown fields dropped): admission need not validate it again
    schema_valid: bool


def decode(rtype: ResourceType, obj: Any, field_validation: str = "Warn") -> Decoded:
    """Check a request body as the apiserver's decoder does: a JSON object of the right
    kind; unknown fields refused (`Strict`, 400), reported as warnings (`Warn`) or
    ignored, and in both last cases dropped."""
    if not isinstance(obj, dict):
        raise errors.bad_request(f"{rtype.kind} in version \"{rtype.version}\" cannot be handled as a "
                                 f"{rtype.kind}: json: cannot unmarshal into Go value of type {rtype.kind}")
    if obj.get("kind") and obj["kind"] != rtype.kind:
        raise errors.bad_request(
            f"{obj['kind']} in version \"{rtype.version}\" cannot be handled as a {rtype.kind}: "
            f"the object provided is unrecognized (kind {obj['kind']!r} is not {rtype.kind!r})")
    if obj.get("apiVersion") and obj["apiVersion"] != rtype.api_version:
        raise errors.bad_request(
            f"the API version in the data ({obj['apiVersion']}) does not match the expected API version "
            f"({rtype.api_version})")
    obj = copy_json(obj)
    obj.setdefault("apiVersion", rtype.api_version)
    obj.setdefault("kind", rtype.kind)
    unknown, others = _schema_errors(rtype.api_version, rtype.kind, obj)
    if unknown and field_validation == "Strict":
        fields = ", ".join(f'unknown field "{_dotted(p)}"' for p, _ in unknown)
        raise errors.bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                                 f"{rtype.kind}: strict decoding error: {fields}")
    _prune(obj, unknown)
    warnings = [f'unknown field "{_dotted(p)}"' for p, _ in unknown] if field_validation == "Warn" else []
    return Decoded(obj, warnings, not others)


def _schema_errors(api_version: str, kind: str, obj: Obj) -> tuple[list[tuple[tuple[Any, ...], str]], list[Any]]:
    """(path, key) of every field the schema does not know, and the other schema errors."""
    unknown: list[tuple[tuple[Any, ...], str]] = []
    others: list[Any] = []
    if openapi.valid(api_version, kind, obj):  # the common case, without jsonschema's cost
        return unknown, others
    for e in openapi.errors(api_version, kind, obj):
        if e.validator == "additionalProperties" and isinstance(e.instance, dict) and isinstance(e.schema, dict):
            known = set(e.schema.get("properties") or {})
            unknown += [(tuple(e.absolute_path) + (k,), k) for k in e.instance if k not in known]
        else:
            others.append(e)
    return unknown, others


def _prepare(rtype: ResourceType, obj: Any) -> Obj:
    if not isinstance(obj, dict):
        raise errors.bad_request(f"{rtype.kind} body must be a JSON object")
    obj = copy_json(obj)
    if obj.get("apiVersion") not in (None, rtype.api_version):
        raise errors.bad_request(
            f"the API version in the data ({obj['apiVersion']}) does not match the expected API version "
            f"({rtype.api_version})")
    if obj.get("kind") not in (None, rtype.kind):
        raise errors.bad_request(f"{obj['kind']} in version \"{rtype.version}\" cannot be handled as a {rtype.kind}")
    obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
    if not isinstance(obj.get("metadata", {}), dict):
        raise errors.bad_request(f"{rtype.kind}.metadata must be an object")
    return obj


def _validate_schema(rtype: ResourceType, obj: Obj) -> None:
    """Refuse what does not fit the OpenAPI schema, naming each field (unknown fields are
    pruned instead: `decode` has already applied the request's fieldValidation)."""
    unknown, others = _schema_errors(rtype.api_version, rtype.kind, obj)
    if others:
        _raise_invalid(rtype, obj, _dedupe([_cause_from_schema(e) for e in others]))
    _prune(obj, unknown)


def _cause_from_schema(e: Any) -> Cause:
    path = list(e.absolute_path)
    if e.validator == "required":
        missing = [k for k in e.validator_value if not isinstance(e.instance, dict) or k not in e.instance]
        return _cause(_field(path + missing[:1]), "FieldValueRequired", "Required value")
    value = _show(e.instance)
    if e.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in e.validator_value if v is not None)
        return _cause(_field(path), "FieldValueNotSupported",
                      f"Unsupported value: {value}: supported values: {allowed}")
    if e.validator == "type":
        want = e.validator_value if isinstance(e.validator_value, str) else \
            " or ".join(t for t in e.validator_value if t != "null")
        return _cause(_field(path), "FieldValueTypeInvalid",
                      f"Invalid value: {value}: must be of type {want}")
    if e.validator in ("oneOf", "anyOf"):
        return _cause(_field(path), "FieldValueTypeInvalid",
                      f"Invalid value: {value}: must be a string or a number")
    return _cause(_field(path), "FieldValueInvalid", f"Invalid value: {value}: {e.message}")


def _prune(obj: Obj, unknown: list[tuple[tuple[Any, ...], str]]) -> None:
    for path, key in unknown:
        cur: Any = obj
        for part in path[:-1]:
            try:
                cur = cur[part]
            except (KeyError, IndexError, TypeError):
                cur = None
                break
        if isinstance(cur, dict):
            cur.pop(key, None)
