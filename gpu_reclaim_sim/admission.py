"""What the apiserver does to an object between decoding it and storing it.

`admit_create` and `admit_update` return a prepared deep copy or raise `errors.ApiError`,
in the order the real server works: schema (type) validation, defaulting, mutating
admission plugins (Priority, DefaultTolerationSeconds, ServiceAccount (see
`serviceaccounts.admit_pod`), DefaultStorageClass and PVC protection, the Service IP
allocator), then the semantic validation the OpenAPI schema cannot express. Messages follow the apiserver's wording, e.g.
`Pod "x" is invalid: spec.containers[0].image: Required value`.

Simplifications (documented in docs/sim.md):
- unknown fields are pruned here (`decode` reports them, for `fieldValidation`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import json
import random
import re
from fractions import Fraction
from typing import Any, NamedTuple

from . import errors, netpol, openapi, quantity, rbac, serviceaccounts
from .errors import ApiError
from .resources import BY_KIND, ResourceType
from .selectors import object_label_matcher
from .store import Obj, Store, copy_json

Cause = dict[str, str]

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
               "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
               "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
NODE_PORTS = range(30000, 32768)
DEFAULT_TOLERATION_SECONDS = 300
PVC_PROTECTION = "kubernetes.io/pvc-protection"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
COMPUTE = ("cpu", "memory")
_NATIVE_PREFIXES = ("kubernetes.io/", "requests.")


# --- entry points ---------------------------------------------------------------------

def admit_create(store: Store, rtype: ResourceType, obj: Obj, namespace: str | None = None, *,
                 schema_valid: bool = False) -> Obj:
    """Validate, default and admit a new object; returns the object to store.
    `schema_valid`: `decode` found it fits the schema (validating a pod costs milliseconds)."""
    obj = _prepare(rtype, obj)
    meta = obj.setdefault("metadata", {})
    if rtype.namespaced and namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    if rtype.namespaced and isinstance(meta.get("namespace") or "", str):  # NamespaceLifecycle comes first
        store.check_namespace(rtype, meta.get("namespace") or "default", str(meta.get("name") or ""))
    if not schema_valid:
        _validate_schema(rtype, obj)
    if rtype.kind != "Node":  # status is the server's to set (kubelets register nodes with theirs)
        obj.pop("status", None)
    _DEFAULTERS.get(rtype.kind, _noop)(store, obj)
    _CREATE_PLUGINS.get(rtype.kind, _noop)(store, obj)
    causes = _validate_meta(rtype, meta, creating=True)
    causes += _VALIDATORS.get(rtype.kind, _no_causes)(store, obj)
    _raise_invalid(rtype, obj, causes)
    return obj


def admit_update(
    store: Store, rtype: ResourceType, old: Obj, new: Obj, subresource: str | None = None, *,
    schema_valid: bool = False,
) -> Obj:
    """Validate an update (PUT or a patch's result) against the stored `old` object.

    For `subresource="status"` only the status changes; for the main resource of a kind
    with a status subresource the status is kept, as the real registry strategies do."""
    new = _prepare(rtype, new)
    meta = new.setdefault("metadata", {})
    for key in ("name", "namespace"):
        if key in old["metadata"]:
            meta.setdefault(key, old["metadata"][key])
    if not schema_valid:
        _validate_schema(rtype, new)
    if subresource == "status":
        merged = copy.deepcopy(old)
        merged["status"] = new.get("status") or {}
        merged["metadata"]["resourceVersion"] = meta.get("resourceVersion") or old["metadata"].get(
            "resourceVersion")
        for key in ("labels", "annotations"):  # the status strategies let these through
            if key in meta:
                merged["metadata"][key] = meta[key]
        return merged
    if rtype.status_subresource or rtype.kind == "Namespace":
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    _DEFAULTERS.get(rtype.kind, _noop)(store, new, old)
    causes = _validate_meta(rtype, meta, creating=False)
    causes += _UPDATE_VALIDATORS.get(rtype.kind, _no_update_causes)(store, old, new)
    if not causes:
        causes += _VALIDATORS.get(rtype.kind, _no_causes)(store, new)
    _raise_invalid(rtype, new, causes)
    return new


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
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = set(e.schema.get("properties") or {})
            unknown += [(tuple(e.absolute_path) + (k,), k) for k in e.instance if k not in known]
        else:
            others.append(e)
    return unknown, others


# --- schema validation ----------------------------------------------------------------

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


# --- metadata -------------------------------------------------------------------------

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
    if rtype.kind in rbac.RBAC_KINDS:  # RBAC names need only be valid path segments
        return [_cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {m}")
                for m in rbac.path_segment_problems(name)]
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


# --- pods -----------------------------------------------------------------------------

def _default_pod(store: Store, pod: Obj, old: Obj | None = None) -> None:
    """SetDefaults_Pod / PodSpec / Container, as the apiserver decodes any pod."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):
        spec.setdefault("serviceAccountName", spec.get("serviceAccount"))
        spec["serviceAccount"] = spec["serviceAccountName"]
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _default_container(c)
    for v in spec.get("volumes") or []:
        for kind in ("secret", "configMap", "projected", "downwardAPI"):
            if isinstance(v, dict) and isinstance(v.get(kind), dict):
                v[kind].setdefault("defaultMode", 420)
    for t in spec.get("tolerations") or []:
        if isinstance(t, dict) and t.get("operator") is None and "key" in t:
            t["operator"] = "Equal"


def _default_container(c: dict[str, Any]) -> None:
    image = c.get("image") or ""
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = "Always" if _image_tag(image) in ("", "latest") and "@" not in image \
            else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    for kind in ("limits", "requests"):  # the server always answers quantities as strings
        if isinstance(res, dict) and isinstance(res.get(kind), dict):
            res[kind] = {k: _quantity_string(v) for k, v in res[kind].items()}
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        requests = res.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in res["limits"].items():
                requests.setdefault(name, value)  # the real defaulter copies limits to missing requests
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef") if isinstance(e, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _quantity_string(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def _image_tag(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def _admit_pod(store: Store, pod: Obj) -> None:
    """The mutating plugins that run on pod creation."""
    spec = pod["spec"]
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    _admit_priority(store, spec, name)
    serviceaccounts.admit_pod(store, pod)
    _add_default_tolerations(spec)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _admit_priority(store: Store, spec: dict[str, Any], pod_name: str) -> None:
    classes = list(store.objects(BY_KIND["PriorityClass"]))
    class_name = spec.get("priorityClassName")
    if class_name:
        pc = next((c for c in classes if c["metadata"]["name"] == class_name), None)
        if pc is None and class_name in ("system-cluster-critical", "system-node-critical"):
            pc = {"value": 2000000000 if class_name == "system-cluster-critical" else 2000001000}
        if pc is None:
            raise ApiError(403, f'pods "{pod_name}" is forbidden: no PriorityClass with name '
                                f"{class_name} was found", details={"name": pod_name, "kind": "pods"})
    else:
        pc = next((c for c in classes if c.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    value = int(pc.get("value", 0)) if pc else 0
    if spec.get("priority") is not None and spec["priority"] != value:
        raise ApiError(403, f'pods "{pod_name}" is forbidden: the integer value of priority '
                            f"({spec['priority']}) must not be provided in pod spec; priority admission "
                            f"controller computed {value} from the given PriorityClass name",
                       details={"name": pod_name, "kind": "pods"})
    spec["priority"] = value
    spec.setdefault("preemptionPolicy", (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority")


def _add_default_tolerations(spec: dict[str, Any]) -> None:
    """DefaultTolerationSeconds: tolerate not-ready/unreachable nodes for 300 s."""
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if any(_tolerates(t, key, "NoExecute") for t in tolerations if isinstance(t, dict)):
            continue
        tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})


def _tolerates(t: dict[str, Any], key: str, effect: str) -> bool:
    if t.get("effect") not in (None, "", effect):
        return False
    return (t.get("operator") == "Exists" and not t.get("key")) or t.get("key") == key


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort, from the cpu/memory requests and limits."""
    containers = [c for key in ("containers", "initContainers") for c in spec.get(key) or []
                  if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests = {k: v for k, v in (res.get("requests") or {}).items() if k in COMPUTE}
        limits = {k: v for k, v in (res.get("limits") or {}).items() if k in COMPUTE}
        if requests or limits:
            any_set = True
        if set(limits) != set(COMPUTE) or any(
            _quantity(requests.get(k, limits[k])) != _quantity(limits[k]) for k in COMPUTE
        ):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity(value: Any) -> Fraction | None:
    try:
        return quantity.parse(value)
    except (ValueError, TypeError):
        return None


def _validate_pod(store: Store, pod: Obj) -> list[Cause]:
    spec = pod.get("spec") or {}
    causes: list[Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(_cause("spec.containers", "FieldValueRequired", "Required value"))
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    causes += _unique_names(spec.get("volumes") or [], "spec.volumes")
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            causes += _validate_container(c, f"spec.{key}[{i}]", seen, volumes)
    if spec.get("restartPolicy") not in ("Always", "OnFailure", "Never"):
        causes.append(_cause("spec.restartPolicy", "FieldValueNotSupported",
                             f'Unsupported value: {json.dumps(spec.get("restartPolicy"))}: supported values: '
                             '"Always", "OnFailure", "Never"'))
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        causes.append(_cause("spec.terminationGracePeriodSeconds", "FieldValueInvalid",
                             f"Invalid value: {grace}: must be greater than or equal to 0"))
    for i, t in enumerate(spec.get("tolerations") or []):
        if t.get("operator") == "Exists" and t.get("value"):
            causes.append(_cause(f"spec.tolerations[{i}].operator", "FieldValueInvalid",
                                 f'Invalid value: {json.dumps(t["value"])}: value must be empty when '
                                 "`operator` is 'Exists'"))
    return causes


def _validate_container(c: dict[str, Any], path: str, seen: set[str], volumes: set[Any]) -> list[Cause]:
    causes: list[Cause] = []
    name = c.get("name")
    if not name:
        causes.append(_cause(f"{path}.name", "FieldValueRequired", "Required value"))
    elif not DNS1123_LABEL.match(name) or len(name) > 63:
        causes.append(_cause(f"{path}.name", "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {LABEL_MSG}"))
    elif name in seen:
        causes.append(_cause(f"{path}.name", "FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}"))
    else:
        seen.add(name)
    image = c.get("image")
    if not image:
        causes.append(_cause(f"{path}.image", "FieldValueRequired", "Required value"))
    elif image != image.strip():
        causes.append(_cause(f"{path}.image", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(image)}: must not have leading or trailing whitespace"))
    for i, p in enumerate(c.get("ports") or []):
        port = p.get("containerPort")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            causes.append(_cause(f"{path}.ports[{i}].containerPort", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(port)}: must be between 1 and 65535, inclusive"))
    for i, e in enumerate(c.get("env") or []):
        ename = e.get("name")
        if not ename:
            causes.append(_cause(f"{path}.env[{i}].name", "FieldValueRequired", "Required value"))
        elif not _ENV_NAME.match(ename):
            causes.append(_cause(f"{path}.env[{i}].name", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(ename)}: a valid environment variable name must "
                                 "consist of alphabetic characters, digits, '_', '-', or '.', and must not "
                                 "start with a digit"))
    for i, m in enumerate(c.get("volumeMounts") or []):
        if not m.get("mountPath"):
            causes.append(_cause(f"{path}.volumeMounts[{i}].mountPath", "FieldValueRequired", "Required value"))
        if m.get("name") not in volumes:
            causes.append(_cause(f"{path}.volumeMounts[{i}].name", "FieldValueNotFound",
                                 f"Not found: {json.dumps(m.get('name'))}"))
    causes += _validate_resources(c.get("resources") or {}, f"{path}.resources")
    return causes


def _validate_resources(res: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    parsed: dict[str, dict[str, Fraction]] = {}
    for kind in ("limits", "requests"):
        parsed[kind] = {}
        for name, value in (res.get(kind) or {}).items():
            where = f"{path}.{kind}[{name}]"
            q = _quantity(value)
            if q is None:
                causes.append(_cause(where, "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(value)}: quantities must match the regular "
                                     "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
                continue
            if q < 0:
                causes.append(_cause(where, "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(value)}: must be greater than or equal to 0"))
            if _is_extended(name) and q.denominator != 1:
                causes.append(_cause(where, "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(value)}: must be an integer"))
            parsed[kind][name] = q
    limits, requests = parsed["limits"], parsed["requests"]
    for name, req in requests.items():
        lim = limits.get(name)
        if _is_extended(name):
            if lim is None:
                causes.append(_cause(f"{path}.limits", "FieldValueRequired",
                                     "Required value: Limit must be set for non overcommitable resources"))
            elif lim != req:
                causes.append(_cause(f"{path}.requests", "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(str(res['requests'][name]))}: must be equal to "
                                     f"{name} limit of {res['limits'][name]}"))
        elif lim is not None and req > lim:
            causes.append(_cause(f"{path}.requests", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(str(res['requests'][name]))}: must be less than or "
                                 f"equal to {name} limit of {res['limits'][name]}"))
    return causes


def _is_extended(name: str) -> bool:
    """Extended resources (`nvidia.com/gpu`) are integers and never overcommitted."""
    return "/" in name and not name.startswith(_NATIVE_PREFIXES) and not name.startswith("hugepages-")


def _validate_pod_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    ospec, nspec = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    causes: list[Cause] = []
    otol, ntol = ospec.get("tolerations") or [], nspec.get("tolerations") or []
    if any(t not in ntol for t in otol):
        causes.append(_cause("spec.tolerations", "FieldValueForbidden",
                             "Forbidden: existing toleration can not be modified except its tolerationSeconds"))
    # the fields an update may change are made equal before comparing the rest
    for key in ("containers", "initContainers"):
        olist, nlist = ospec.get(key) or [], nspec.get(key) or []
        if len(olist) == len(nlist):
            for oc, nc in zip(olist, nlist):
                if isinstance(oc, dict) and isinstance(nc, dict):
                    nc["image"] = oc.get("image")
    for key in ("activeDeadlineSeconds", "tolerations"):
        nspec.pop(key, None)
        ospec.pop(key, None)
    if nspec.get("terminationGracePeriodSeconds") == 1 and (ospec.get("terminationGracePeriodSeconds") or 0) < 0:
        nspec["terminationGracePeriodSeconds"] = ospec["terminationGracePeriodSeconds"]
    for key in ("nodeName", "priority", "priorityClassName", "preemptionPolicy",
                "serviceAccountName", "serviceAccount"):
        if key not in nspec and key in ospec:
            nspec[key] = ospec[key]  # set by admission at creation; a client may omit them
    if nspec != ospec:
        causes.append(_cause("spec", "FieldValueForbidden", "Forbidden: " + POD_UPDATE_FORBIDDEN))
    return causes


# --- persistent volume claims ---------------------------------------------------------

def _default_pvc(store: Store, pvc: Obj, old: Obj | None = None) -> None:
    spec = pvc.setdefault("spec", {})
    if old is not None:
        for key in ("volumeName", "storageClassName", "volumeMode"):
            if key in (old.get("spec") or {}):
                spec.setdefault(key, old["spec"][key])
    spec.setdefault("volumeMode", "Filesystem")


def _admit_pvc(store: Store, pvc: Obj) -> None:
    """DefaultStorageClass (a claim that names no class gets the default one, if any) and
    the StorageObjectInUseProtection finalizer; the volume binder (sim.persistentvolumes) binds it."""
    spec = pvc["spec"]
    if spec.get("storageClassName") is None:
        default = default_storage_class(store)
        if default is not None:
            spec["storageClassName"] = default
    finalizers = pvc["metadata"].setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    pvc["status"] = {"phase": "Pending"}


def default_storage_class(store: Store) -> str | None:
    """The class marked `storageclass.kubernetes.io/is-default-class: "true"` (the newest
    if several are, as the admission plugin picks)."""
    marked = [sc for sc in store.objects(BY_KIND["StorageClass"])
              if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
    if not marked:
        return None
    return max(marked, key=lambda sc: (sc["metadata"].get("creationTimestamp", ""),
                                       sc["metadata"]["name"]))["metadata"]["name"]


def _validate_pvc(store: Store, pvc: Obj) -> list[Cause]:
    spec = pvc.get("spec") or {}
    causes: list[Cause] = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(_cause("spec.accessModes", "FieldValueRequired",
                             "Required value: at least 1 access mode is required"))
    allowed = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
    for m in modes:
        if m not in allowed:
            causes.append(_cause("spec.accessModes", "FieldValueNotSupported",
                                 f"Unsupported value: {json.dumps(m)}: supported values: "
                                 + ", ".join(f'"{a}"' for a in allowed)))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(_cause("spec.resources[storage]", "FieldValueRequired", "Required value"))
    elif _quantity(storage) is None or _quantity(storage) <= 0:
        causes.append(_cause("spec.resources[storage]", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(storage)}: must be greater than zero"))
    return causes


def _validate_pvc_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    ospec, nspec = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    for spec in (ospec, nspec):
        spec.pop("resources", None)
        spec.pop("volumeAttributesClassName", None)
    if ospec != nspec:
        return [_cause("spec", "FieldValueForbidden",
                       "Forbidden: spec is immutable after creation except resources.requests and "
                       "volumeAttributesClassName for bound claims")]
    return []


# --- services -------------------------------------------------------------------------

def _default_service(store: Store, svc: Obj, old: Obj | None = None) -> None:
    spec = svc.setdefault("spec", {})
    if old is not None:  # a client that omits allocated values keeps them
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key not in spec and key in (old.get("spec") or {}):
                spec[key] = copy.deepcopy(old["spec"][key])
        old_ports = {p.get("port"): p for p in (old.get("spec") or {}).get("ports") or []}
        for p in spec.get("ports") or []:
            if "nodePort" not in p and "nodePort" in old_ports.get(p.get("port"), {}):
                p["nodePort"] = old_ports[p.get("port")]["nodePort"]
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")


def _admit_service(store: Store, svc: Obj) -> None:
    """The Service IP and node-port allocators."""
    spec = svc["spec"]
    if spec["type"] != "ExternalName":
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if ip != "None":
            used = used_service_ips(store)
            if ip:
                _check_cluster_ip(ip, used, store)
            else:
                ip = allocate_ip(store.service_cidr, used, exclude=load_balancer_range(store))
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        used_ports = {p.get("nodePort") for s in store.objects(BY_KIND["Service"])
                      for p in (s.get("spec") or {}).get("ports") or []}
        free = [p for p in NODE_PORTS if p not in used_ports]
        for p in spec.get("ports") or []:
            if "nodePort" not in p and free:
                p["nodePort"] = free.pop(random.randrange(len(free)))
    svc["status"] = {"loadBalancer": {}}


def used_service_ips(store: Store) -> set[str]:
    """Cluster IPs and load-balancer IPs in use (both come from the service network)."""
    used = set()
    for s in store.objects(BY_KIND["Service"]):
        used.update((s.get("spec") or {}).get("clusterIPs") or [])
        used.update(i.get("ip") for i in ((s.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [])
    return used


def load_balancer_range(store: Store) -> ipaddress.IPv4Network:
    """The service network's last /24: load-balancer addresses, as a
    MetalLB pool carved from it (sim.loadbalancers); cluster IPs come from the rest."""
    return ipaddress.ip_network(f"{store.service_cidr.broadcast_address - 255}/24")


def _check_cluster_ip(ip: str, used: set[str], store: Store) -> None:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise _invalid_ip(ip, "must be a valid IP address") from None
    cidr = store.service_cidr
    if addr not in cidr or addr in load_balancer_range(store):
        raise _invalid_ip(ip, f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. "
                              f"The range of valid IPs is {cidr}")
    if ip in used:
        raise _invalid_ip(ip, f"failed to allocate IP {ip}: provided IP is already allocated")


def _invalid_ip(ip: str, message: str) -> ApiError:
    return errors.invalid("Service", "", [_cause("spec.clusterIPs", "FieldValueInvalid",
                                                  f'Invalid value: []string{{"{ip}"}}: {message}')])


def allocate_ip(cidr: Any, used: set[str], exclude: Any = None) -> str:
    """A free address of `cidr` (not in `exclude`) at random, like the real allocator (the
    first ten are left out: .1 is the `kubernetes` Service's on a real cluster)."""
    size = cidr.num_addresses
    for _ in range(1000):
        addr = cidr.network_address + random.randrange(min(10, size - 2), size - 1)
        if str(addr) not in used and (exclude is None or addr not in exclude):
            return str(addr)
    raise ApiError(500, "Internal error occurred: failed to allocate a serviceIP: range is full")


def _validate_service(store: Store, svc: Obj) -> list[Cause]:
    spec = svc.get("spec") or {}
    causes: list[Cause] = []
    types = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
    if spec.get("type") not in types:
        causes.append(_cause("spec.type", "FieldValueNotSupported",
                             f"Unsupported value: {json.dumps(spec.get('type'))}: supported values: "
                             + ", ".join(f'"{t}"' for t in types)))
    if not spec.get("ports") and spec.get("clusterIP") != "None" and spec.get("type") != "ExternalName":
        causes.append(_cause("spec.ports", "FieldValueRequired", "Required value"))
    for i, p in enumerate(spec.get("ports") or []):
        if not isinstance(p.get("port"), int) or not 1 <= p["port"] <= 65535:
            causes.append(_cause(f"spec.ports[{i}].port", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(p.get('port'))}: must be between 1 and 65535, inclusive"))
        if len(spec["ports"]) > 1 and not p.get("name"):
            causes.append(_cause(f"spec.ports[{i}].name", "FieldValueRequired", "Required value"))
    return causes


def _validate_service_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    oip, nip = (old.get("spec") or {}).get("clusterIP"), (new.get("spec") or {}).get("clusterIP")
    if oip and nip != oip and (old.get("spec") or {}).get("type") != "ExternalName":
        return [_cause("spec.clusterIPs[0]", "FieldValueInvalid",
                       f"Invalid value: []string{{{json.dumps(nip)}}}: may not change once set")]
    return []


# --- namespaces, secrets, config maps, priority classes -------------------------------

def _admit_namespace(store: Store, ns: Obj) -> None:
    name = ns["metadata"].get("name", "")
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}


def _default_namespace(store: Store, ns: Obj, old: Obj | None = None) -> None:
    name = ns["metadata"].get("name", "")
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name


def _default_secret(store: Store, secret: Obj, old: Obj | None = None) -> None:
    """stringData is folded into data (base64), as the apiserver does; type Opaque."""
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    for key, value in (secret.get("data") or {}).items():
        try:
            base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise errors.bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0 '
                f"(data[{key}])") from None


def _validate_config_keys(store: Store, obj: Obj) -> list[Cause]:
    causes = []
    for field in ("data", "binaryData"):
        for key in (obj.get(field) or {}):
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                causes.append(_cause(f"{field}[{key}]", "FieldValueInvalid",
                                     f"Invalid value: {json.dumps(key)}: a valid config key must consist of "
                                     "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                                     "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
    return causes


def _validate_immutable_data(store: Store, old: Obj, new: Obj) -> list[Cause]:
    if old.get("immutable") and any(old.get(k) != new.get(k) for k in ("data", "binaryData", "immutable")):
        return [_cause("data", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set")]
    return []


def _default_priority_class(store: Store, pc: Obj, old: Obj | None = None) -> None:
    pc.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _validate_priority_class(store: Store, pc: Obj) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(pc.get("value"), int):
        causes.append(_cause("value", "FieldValueRequired", "Required value"))
    if pc.get("globalDefault"):
        for other in store.objects(BY_KIND["PriorityClass"]):
            if other.get("globalDefault") and other["metadata"]["name"] != pc["metadata"].get("name"):
                causes.append(_cause("globalDefault", "FieldValueInvalid",
                                     f"Invalid value: true: PriorityClass {other['metadata']['name']} is already "
                                     "marked as default. Only one default can exist"))
    return causes


def _validate_priority_class_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    if old.get("value") != new.get("value"):
        return [_cause("value", "FieldValueForbidden", "Forbidden: may not be changed in an update.")]
    if old.get("preemptionPolicy") != new.get("preemptionPolicy"):
        return [_cause("preemptionPolicy", "FieldValueInvalid",
                       f"Invalid value: {json.dumps(new.get('preemptionPolicy'))}: field is immutable")]
    return []


# --- workloads (apps/v1) --------------------------------------------------------------
#
# Deployments, ReplicaSets, StatefulSets and DaemonSets: the apps/v1 defaults
# (SetDefaults_Deployment...), their pod templates defaulted and validated as pods are,
# and the apps validation the schema cannot express (selector vs template labels,
# strategies, immutable fields).

_WORKLOADS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")
STS_UPDATABLE = ("replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                 "minReadySeconds")


def _default_workload(store: Store, obj: Obj, old: Obj | None = None) -> None:
    kind = obj["kind"]
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        if isinstance(template.get("spec"), dict):
            _default_pod(store, {"spec": template["spec"]})
    if kind != "DaemonSet":
        spec.setdefault("replicas", 1)
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        spec.setdefault("revisionHistoryLimit", 10)
    if kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
    elif kind == "StatefulSet":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
        retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        retention.setdefault("whenDeleted", "Retain")
        retention.setdefault("whenScaled", "Retain")
        for claim in spec.get("volumeClaimTemplates") or []:
            if isinstance(claim, dict):
                claim.setdefault("apiVersion", "v1")
                claim.setdefault("kind", "PersistentVolumeClaim")
                claim.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
                claim.setdefault("status", {"phase": "Pending"})
    elif kind == "DaemonSet":
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)


def _validate_workload(store: Store, obj: Obj) -> list[Cause]:
    kind, spec = obj["kind"], obj.get("spec") or {}
    causes: list[Cause] = []
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(_cause("spec.selector", "FieldValueInvalid",
                             f"Invalid value: {_go_map(selector or {})}: empty selector is invalid for "
                             f"{kind.lower()}"))
    elif not object_label_matcher(selector)(labels):
        causes.append(_cause("spec.template.metadata.labels", "FieldValueInvalid",
                             f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`"))
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        causes.append(_cause("spec.replicas", "FieldValueInvalid",
                             f"Invalid value: {replicas}: must be greater than or equal to 0"))
    pod = {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}
    for c in _validate_pod(store, pod):
        causes.append({**c, "field": "spec.template." + c["field"]})
    policy = (template.get("spec") or {}).get("restartPolicy")
    if policy not in (None, "Always"):
        causes.append(_cause("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                             f'Unsupported value: {json.dumps(policy)}: supported values: "Always"'))
    if kind == "Deployment":
        causes += _validate_rolling(spec.get("strategy") or {}, "spec.strategy", replicas_field=True)
    elif kind == "DaemonSet":
        causes += _validate_rolling(spec.get("updateStrategy") or {}, "spec.updateStrategy", replicas_field=False)
    elif kind == "StatefulSet":
        for i, claim in enumerate(spec.get("volumeClaimTemplates") or []):
            for c in _validate_pvc(store, {"spec": claim.get("spec") or {}}):
                causes.append({**c, "field": f"spec.volumeClaimTemplates[{i}]." + c["field"]})
    return causes


def _validate_rolling(strategy: dict[str, Any], path: str, replicas_field: bool) -> list[Cause]:
    rolling = strategy.get("rollingUpdate")
    if strategy.get("type") in ("Recreate", "OnDelete"):
        if rolling is not None:
            return [_cause(f"{path}.rollingUpdate", "FieldValueForbidden",
                           f"Forbidden: may not be specified when strategy `type` is '{strategy['type']}'")]
        return []
    rolling = rolling or {}
    causes = []
    for key in ("maxUnavailable", "maxSurge"):
        value = rolling.get(key)
        if isinstance(value, str) and not re.fullmatch(r"[0-9]+%", value):
            causes.append(_cause(f"{path}.rollingUpdate.{key}", "FieldValueInvalid",
                                 f"Invalid value: {json.dumps(value)}: a valid percent string must be a numeric "
                                 "string followed by an ending '%' (e.g. '1%',  or '93%', regex used for "
                                 "validation is '[0-9]+%')"))
    if _is_zero(rolling.get("maxUnavailable")) and _is_zero(rolling.get("maxSurge")):
        causes.append(_cause(f"{path}.rollingUpdate.maxUnavailable", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(rolling.get('maxUnavailable'))}: may not be 0 when "
                             "`maxSurge` is 0"))
    return causes


def _is_zero(value: Any) -> bool:
    return value in (0, "0", "0%")


def _validate_workload_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    if ospec.get("selector") != nspec.get("selector"):
        return [_cause("spec.selector", "FieldValueInvalid",
                       f"Invalid value: {_go_selector(nspec.get('selector'))}: field is immutable")]
    if new["kind"] == "StatefulSet":
        rest = [k for k in set(ospec) | set(nspec) if k not in STS_UPDATABLE and ospec.get(k) != nspec.get(k)]
        if rest:
            return [_cause("spec", "FieldValueForbidden",
                           "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                           "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and "
                           "'minReadySeconds' are forbidden")]
    return []


def _go_map(m: dict[str, Any]) -> str:
    """A Go map[string]string as %v prints it in validation messages."""
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(m.items())) + "}"


def _go_selector(selector: Any) -> str:
    return f"v1.LabelSelector{{MatchLabels:{_go_map((selector or {}).get('matchLabels') or {})}}}"


# --- endpoints, volumes, storage classes, policies -------------------------------------

def _default_ports(store: Store, obj: Obj, old: Obj | None = None) -> None:
    """Endpoints subsets' and EndpointSlices' ports default to TCP."""
    holders = obj.get("subsets") or [] if obj["kind"] == "Endpoints" else [obj]
    for holder in holders:
        for p in (holder.get("ports") or []) if isinstance(holder, dict) else []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")


def _default_storage_class(store: Store, sc: Obj, old: Obj | None = None) -> None:
    sc.setdefault("reclaimPolicy", "Delete")
    sc.setdefault("volumeBindingMode", "Immediate")


def _validate_storage_class(store: Store, sc: Obj) -> list[Cause]:
    if not sc.get("provisioner"):
        return [_cause("provisioner", "FieldValueRequired", "Required value")]
    return []


def _default_pv(store: Store, pv: Obj, old: Obj | None = None) -> None:
    spec = pv.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")


def _admit_pv(store: Store, pv: Obj) -> None:
    pv["status"] = {"phase": "Pending"}


def _default_network_policy(store: Store, np: Obj, old: Obj | None = None) -> None:
    """SetDefaults_NetworkPolicy: policyTypes from the rules given; ports TCP."""
    spec = np.setdefault("spec", {})
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            for p in (rule.get("ports") or []) if isinstance(rule, dict) else []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")


# --- RBAC ------------------------------------------------------------------------------

def _default_binding(store: Store, binding: Obj, old: Obj | None = None) -> None:
    rbac.default_binding(binding)


def _validate_role(store: Store, role: Obj) -> list[Cause]:
    return rbac.validate_rules(role.get("rules"), namespaced=role.get("kind") == "Role")


def _validate_binding(store: Store, binding: Obj) -> list[Cause]:
    return rbac.validate_binding(binding, namespaced=binding.get("kind") == "RoleBinding")


def _validate_binding_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    return rbac.validate_binding_update(old, new)


# --- helpers --------------------------------------------------------------------------

def _noop(*args: Any) -> None:
    return None


def _no_causes(store: Store, obj: Obj) -> list[Cause]:
    return []


def _no_update_causes(store: Store, old: Obj, new: Obj) -> list[Cause]:
    return []


def _unique_names(items: list[Any], path: str) -> list[Cause]:
    seen: set[str] = set()
    causes = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not name:
            causes.append(_cause(f"{path}[{i}].name", "FieldValueRequired", "Required value"))
        elif name in seen:
            causes.append(_cause(f"{path}[{i}].name", "FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}"))
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


_DEFAULTERS = {
    **{kind: _default_workload for kind in _WORKLOADS},
    "Endpoints": _default_ports,
    "EndpointSlice": _default_ports,
    "StorageClass": _default_storage_class,
    "PersistentVolume": _default_pv,
    "NetworkPolicy": _default_network_policy,
    "Pod": _default_pod,
    "PersistentVolumeClaim": _default_pvc,
    "Service": _default_service,
    "Namespace": _default_namespace,
    "Secret": _default_secret,
    "PriorityClass": _default_priority_class,
    "RoleBinding": _default_binding,
    "ClusterRoleBinding": _default_binding,
}
_CREATE_PLUGINS = {
    "PersistentVolume": _admit_pv,
    "Pod": _admit_pod,
    "PersistentVolumeClaim": _admit_pvc,
    "Service": _admit_service,
    "Namespace": _admit_namespace,
}
_VALIDATORS = {
    **{kind: _validate_workload for kind in _WORKLOADS},
    "StorageClass": _validate_storage_class,
    "Pod": _validate_pod,
    "PersistentVolumeClaim": _validate_pvc,
    "Service": _validate_service,
    "Secret": _validate_config_keys,
    "ConfigMap": _validate_config_keys,
    "PriorityClass": _validate_priority_class,
    "NetworkPolicy": lambda store, np: netpol.validate(np),
    "Role": _validate_role,
    "ClusterRole": _validate_role,
    "RoleBinding": _validate_binding,
    "ClusterRoleBinding": _validate_binding,
}
_UPDATE_VALIDATORS = {
    **{kind: _validate_workload_update for kind in _WORKLOADS},
    "Pod": _validate_pod_update,
    "PersistentVolumeClaim": _validate_pvc_update,
    "Service": _validate_service_update,
    "Secret": _validate_immutable_data,
    "ConfigMap": _validate_immutable_data,
    "PriorityClass": _validate_priority_class_update,
    "RoleBinding": _validate_binding_update,
    "ClusterRoleBinding": _validate_binding_update,
}
