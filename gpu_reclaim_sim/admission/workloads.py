"""Deployments, ReplicaSets, StatefulSets and DaemonSets: defaulting and validation,
including what an update may change."""

from __future__ import annotations

import json
import re
from typing import Any

from ..selectors import object_label_matcher
from ..store import Obj, Store
from .pods import _default_pod, _validate_pod
from .storage import _validate_pvc
from .validation import Cause, _cause

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


# what the pipeline does for these kinds: defaulting, admission plugins, validation
DEFAULTERS = {kind: _default_workload for kind in _WORKLOADS}
CREATE_PLUGINS: dict = {}
VALIDATORS = {kind: _validate_workload for kind in _WORKLOADS}
UPDATE_VALIDATORS = {kind: _validate_workload_update for kind in _WORKLOADS}
