"""Pods (and PriorityClasses): defaulting, the Priority and DefaultTolerationSeconds
admission plugins, QoS class, validation of a pod and of what a pod update may change."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from typing import Any

from ..rbac import serviceaccounts
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Obj, Store
from .validation import _NATIVE_PREFIXES, DNS1123_LABEL, LABEL_MSG, Cause, _cause, _quantity, _unique_names

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


DEFAULT_TOLERATION_SECONDS = 300


COMPUTE = ("cpu", "memory")


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
            for oc, nc in zip(olist, nlist, strict=True):
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


# what the pipeline does for these kinds: defaulting, admission plugins, validation
DEFAULTERS = {"Pod": _default_pod, "PriorityClass": _default_priority_class}
CREATE_PLUGINS = {"Pod": _admit_pod}
VALIDATORS = {"Pod": _validate_pod, "PriorityClass": _validate_priority_class}
UPDATE_VALIDATORS = {"Pod": _validate_pod_update, "PriorityClass": _validate_priority_class_update}
