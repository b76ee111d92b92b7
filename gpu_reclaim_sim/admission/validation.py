"""The building blocks of the semantic validation: a cause (field, reason, message as the
apiserver words them), field paths, name and label rules, metadata, and the Invalid error."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

from .. import errors
from ..api import quantity
from ..rbac.authorizer import RBAC_KINDS
from ..rbac.validation import path_segment_problems
from ..resources import ResourceType
from ..store import Obj

Cause = dict[str, str]


DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
               "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
               "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


_NATIVE_PREFIXES = ("kubernetes.io/", "requests.")


def _validate_meta(rtype: ResourceType, meta: dict[str, Any], creating: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name")
    if name:
        causes += _name_causes(rtype, name, "metadata.name")
    elif meta.get("generateName"):
        # five random characters follow the prefix; check the prefix would make a valid name
        causes += _name_causes(rtype, meta["generateName"] + "x", "metadata.generateName")
    elif creating:
        causes.append(_cause("metadata.name", "FieldValueRequired",
                             "Required value: name or generateName is required"))
    for key, value in (meta.get("labels") or {}).items():
        causes += _qualified_name_causes(key, "metadata.labels")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(_cause("metadata.labels", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(value)}: a valid label must be an empty string or "
                                 "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                 "with an alphanumeric character"))
    for key in (meta.get("annotations") or {}):
        causes += _qualified_name_causes(key, "metadata.annotations")
    size = sum(len(k) + len(str(v)) for k, v in (meta.get("annotations") or {}).items())
    if size > 256 * 1024:
        causes.append(_cause("metadata.annotations", "FieldValueTooLong",
                             "Too long: must have at most 262144 bytes"))
    return causes


def _name_causes(rtype: ResourceType, name: str, field: str) -> list[Cause]:
    if rtype.kind in RBAC_KINDS:  # RBAC names need only be valid path segments
        return [_cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {m}")
                for m in path_segment_problems(name)]
    if rtype.kind == "Namespace":
        pattern, msg, limit = DNS1123_LABEL, LABEL_MSG, 63
    elif rtype.kind == "Service":
        pattern, msg, limit = DNS1035_LABEL, DNS1035_MSG, 63
    else:
        pattern, msg, limit = DNS1123_SUBDOMAIN, SUBDOMAIN_MSG, 253
    if rtype.kind == "Event":  # event names are free-form apart from path segments
        return [] if "/" not in name else [_cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: may not contain '/'")]
    causes = []
    if len(name) > limit:
        causes.append(_cause(field, "FieldValueInvalid",
                             f"Invalid value: {json.dumps(name)}: must be no more than {limit} characters"))
    if not pattern.match(name):
        causes.append(_cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {msg}"))
    return causes


def _qualified_name_causes(key: Any, field: str) -> list[Cause]:
    if not isinstance(key, str):
        return [_cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(key)}: must be a string")]
    prefix, _, name = key.rpartition("/")
    ok = 0 < len(name) <= 63 and _QUALIFIED_NAME.match(name) and (
        not prefix or (len(prefix) <= 253 and DNS1123_SUBDOMAIN.match(prefix)))
    if ok:
        return []
    return [_cause(field, "FieldValueInvalid",
                   f"Invalid value: {json.dumps(key)}: name part must consist of alphanumeric characters, "
                   "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                   "'my.name',  or '123-abc', regex used for validation is "
                   "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")]


def _quantity(value: Any) -> Fraction | None:
    try:
        return quantity.parse(value)
    except (ValueError, TypeError):
        return None


def _unique_names(items: list[Any], path: str) -> list[Cause]:
    seen: set[str] = set()
    causes = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not name:
            causes.append(_cause(f"{path}[{i}].name", "FieldValueRequired", "Required value"))
        elif name in seen:
            causes.append(_cause(f"{path}[{i}].name", "FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}"))
        else:
            seen.add(name)
    return causes


def _cause(field: str, reason: str, message: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def _dedupe(causes: list[Cause]) -> list[Cause]:
    seen, out = set(), []
    for c in causes:
        key = (c["field"], c["message"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _raise_invalid(rtype: ResourceType, obj: Obj, causes: list[Cause]) -> None:
    if causes:
        meta = obj.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or ""
        raise errors.invalid(rtype.kind, name, causes, rtype.group)


def _field(path: list[Any]) -> str:
    """['spec', 'containers', 0, 'image'] -> spec.containers[0].image"""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{part}]"
    return out


def _dotted(path: tuple[Any, ...]) -> str:
    return _field(list(path))


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
