"""Server-side printing (`meta.k8s.io/v1` Table), what `kubectl get` asks for.

Columns and cell wording follow the apiserver's printers (pkg/printers/internalversion)
for the kinds this simulator serves; anything else gets NAME and AGE.
"""

from __future__ import annotations

from typing import Any, Callable


from ..api.timestamps import parse_time, utcnow
from ..selectors import selector_string

Obj = dict[str, Any]
Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def table(rtype_kind: str, objects: list[Obj], resource_version: str, include: str = "PartialObjectMetadata",
          continue_token: str | None = None) -> Obj:
    columns, row = _PRINTERS.get(rtype_kind, _GENERIC)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": p}
            for n, t, p in columns
        ],
        "rows": [{"cells": row(o), "object": _row_object(o, include)} for o in objects],
    }


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, as the AGE column shows it."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(value: str | None) -> str:
    try:
        created = parse_time(value)
    except ValueError:
        created = None
    if created is None:
        return "<unknown>"
    return human_duration((utcnow() - created).total_seconds())


def _name(o: Obj) -> str:
    return o["metadata"]["name"]


def _generic_row(o: Obj) -> list[Any]:
    return [_name(o), _age(o["metadata"].get("creationTimestamp"))]


_GENERIC: tuple[list[Column], Callable[[Obj], list[Any]]] = ([("Name", "string", 0), ("Age", "string", 0)], _generic_row)


# --- pods -----------------------------------------------------------------------------

def _pod_row(pod: Obj) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    gates = spec.get("readinessGates") or []
    return [
        _name(pod), f"{ready}/{total}", pod_status_reason(pod), str(restarts),
        _age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>" if not gates else f"0/{len(gates)}",
    ]


def pod_status_reason(pod: Obj) -> str:
    """The STATUS column: phase, or the reason a container waits or ended, or Terminating."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for i, c in enumerate(status.get("initContainerStatuses") or []):
        state = c.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len((pod.get('spec') or {}).get('initContainers') or [])}"
        break
    else:
        running = False
        for c in reversed(status.get("containerStatuses") or []):
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif (state.get("terminated") or {}).get("reason"):
                reason = state["terminated"]["reason"]
            elif state.get("terminated"):
                t = state["terminated"]
                reason = f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
            elif state.get("running") and c.get("ready"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


_POD = ([("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0),
         ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1),
         ("Readiness Gates", "string", 1)], _pod_row)


# --- nodes ----------------------------------------------------------------------------

def _node_row(node: Obj) -> list[Any]:
    status, labels = node.get("status") or {}, node["metadata"].get("labels") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    roles = sorted({k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
                   | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        _name(node), state, ",".join(roles) or "<none>", _age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""), addresses.get("InternalIP", "<none>"), addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


_NODE = ([("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0),
          ("Version", "string", 0), ("Internal-IP", "string", 1), ("External-IP", "string", 1),
          ("OS-Image", "string", 1), ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)], _node_row)


# --- the rest -------------------------------------------------------------------------

def _namespace_row(ns: Obj) -> list[Any]:
    return [_name(ns), (ns.get("status") or {}).get("phase", ""), _age(ns["metadata"].get("creationTimestamp"))]


def _event_row(ev: Obj) -> list[Any]:
    inv = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    source = ev.get("source") or {}
    return [
        _age(last), ev.get("type", ""), ev.get("reason", ""),
        f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}", ev.get("message", ""),
        inv.get("fieldPath", ""), ", ".join(v for v in (source.get("component"), source.get("host")) if v),
        _age(ev.get("firstTimestamp") or last), str(ev.get("count") or 1), _name(ev),
    ]


def _pvc_row(pvc: Obj) -> list[Any]:
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    modes = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    phase = "Terminating" if pvc["metadata"].get("deletionTimestamp") else status.get("phase", "")
    return [
        _name(pvc), phase, spec.get("volumeName", ""), (status.get("capacity") or {}).get("storage", ""),
        ",".join(modes.get(m, m) for m in status.get("accessModes") or []), spec.get("storageClassName", "<unset>"),
        spec.get("volumeAttributesClassName") or "<unset>", _age(pvc["metadata"].get("creationTimestamp")),
        spec.get("volumeMode", ""),
    ]


def _service_row(svc: Obj) -> list[Any]:
    spec = svc.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    ingress = [i.get("ip") or i.get("hostname") for i in
               ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]
    external = ",".join([ip for ip in ingress if ip] + list(spec.get("externalIPs") or [])) or (
        "<pending>" if spec.get("type") == "LoadBalancer" else "<none>")
    return [_name(svc), spec.get("type", ""), spec.get("clusterIP") or "<none>", external, ports,
            _age(svc["metadata"].get("creationTimestamp")), selector]


def _secret_row(s: Obj) -> list[Any]:
    return [_name(s), s.get("type", ""), len(s.get("data") or {}), _age(s["metadata"].get("creationTimestamp"))]


def _configmap_row(c: Obj) -> list[Any]:
    return [_name(c), len(c.get("data") or {}) + len(c.get("binaryData") or {}),
            _age(c["metadata"].get("creationTimestamp"))]


def _priority_class_row(pc: Obj) -> list[Any]:
    return [_name(pc), pc.get("value", 0), bool(pc.get("globalDefault")),
            _age(pc["metadata"].get("creationTimestamp")), pc.get("preemptionPolicy", "")]


# --- workloads, endpoints, storage, policies --------------------------------------------

def _template_columns(o: Obj) -> list[str]:
    containers = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


def _selector(o: Obj) -> str:
    return selector_string((o.get("spec") or {}).get("selector")) or "<none>"


def _count(o: Obj, field: str) -> int:
    return int((o.get("status") or {}).get(field) or 0)


def _deployment_row(d: Obj) -> list[Any]:
    replicas = int((d.get("spec") or {}).get("replicas", 1) or 0)
    return [_name(d), f"{_count(d, 'readyReplicas')}/{replicas}", _count(d, "updatedReplicas"),
            _count(d, "availableReplicas"), _age(d["metadata"].get("creationTimestamp")),
            *_template_columns(d), _selector(d)]


def _replica_set_row(rs: Obj) -> list[Any]:
    return [_name(rs), int((rs.get("spec") or {}).get("replicas", 1) or 0), _count(rs, "replicas"),
            _count(rs, "readyReplicas"), _age(rs["metadata"].get("creationTimestamp")),
            *_template_columns(rs), _selector(rs)]


def _stateful_set_row(sts: Obj) -> list[Any]:
    replicas = int((sts.get("spec") or {}).get("replicas", 1) or 0)
    return [_name(sts), f"{_count(sts, 'readyReplicas')}/{replicas}", _age(sts["metadata"].get("creationTimestamp")),
            *_template_columns(sts)]


def _daemon_set_row(ds: Obj) -> list[Any]:
    node_selector = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [_name(ds), _count(ds, "desiredNumberScheduled"), _count(ds, "currentNumberScheduled"),
            _count(ds, "numberReady"), _count(ds, "updatedNumberScheduled"), _count(ds, "numberAvailable"),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            _age(ds["metadata"].get("creationTimestamp")), *_template_columns(ds), _selector(ds)]


def _endpoints_row(ep: Obj) -> list[Any]:
    """ENDPOINTS: ip:port pairs, the first three and "+ N more..."."""
    pairs = [f"{a['ip']}:{p['port']}" if subset.get("ports") else a["ip"]
             for subset in ep.get("subsets") or [] for a in subset.get("addresses") or []
             for p in (subset.get("ports") or [{}])]
    shown = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "")
    return [_name(ep), shown or "<none>", _age(ep["metadata"].get("creationTimestamp"))]


def _endpoint_slice_row(s: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in s.get("ports") or []) or "<unset>"
    addresses = [a for e in s.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3]) + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")
    return [_name(s), s.get("addressType", ""), ports, shown or "<unset>", _age(s["metadata"].get("creationTimestamp"))]


_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _pv_row(pv: Obj) -> list[Any]:
    spec, status = pv.get("spec") or {}, pv.get("status") or {}
    ref = spec.get("claimRef") or {}
    phase = "Terminating" if pv["metadata"].get("deletionTimestamp") else status.get("phase", "")
    return [_name(pv), (spec.get("capacity") or {}).get("storage", ""),
            ",".join(_ACCESS_MODES.get(m, m) for m in spec.get("accessModes") or []),
            spec.get("persistentVolumeReclaimPolicy", ""), phase,
            f"{ref.get('namespace')}/{ref.get('name')}" if ref else "", spec.get("storageClassName", ""),
            spec.get("volumeAttributesClassName") or "<unset>", status.get("reason", ""),
            _age(pv["metadata"].get("creationTimestamp")), spec.get("volumeMode", "")]


def _storage_class_row(sc: Obj) -> list[Any]:
    default = (sc["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    return [_name(sc) + (" (default)" if default else ""), sc.get("provisioner", ""), sc.get("reclaimPolicy", ""),
            sc.get("volumeBindingMode", ""), bool(sc.get("allowVolumeExpansion")),
            _age(sc["metadata"].get("creationTimestamp"))]


def _pdb_row(pdb: Obj) -> list[Any]:
    spec = pdb.get("spec") or {}
    return [_name(pdb), str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            _count(pdb, "disruptionsAllowed"), _age(pdb["metadata"].get("creationTimestamp"))]


def _network_policy_row(np: Obj) -> list[Any]:
    selector = selector_string((np.get("spec") or {}).get("podSelector") or {})
    return [_name(np), selector or "<none>", _age(np["metadata"].get("creationTimestamp"))]


def _service_account_row(sa: Obj) -> list[Any]:
    return [_name(sa), len(sa.get("secrets") or []), _age(sa["metadata"].get("creationTimestamp"))]


def _role_row(role: Obj) -> list[Any]:
    return [_name(role), role["metadata"].get("creationTimestamp") or ""]


def _binding_row(binding: Obj) -> list[Any]:
    ref = binding.get("roleRef") or {}
    subjects = binding.get("subjects") or []

    def names(kind: str) -> str:
        return ", ".join(s.get("name", "") if kind != "ServiceAccount" else f"{s.get('namespace', '')}/{s.get('name')}"
                         for s in subjects if s.get("kind") == kind)

    return [_name(binding), f"{ref.get('kind', '')}/{ref.get('name', '')}",
            _age(binding["metadata"].get("creationTimestamp")), names("User"), names("Group"),
            names("ServiceAccount")]


_ROLE = ([("Name", "string", 0), ("Created At", "date", 0)], _role_row)
_BINDING = ([("Name", "string", 0), ("Role", "string", 0), ("Age", "string", 0), ("Users", "string", 1),
             ("Groups", "string", 1), ("ServiceAccounts", "string", 1)], _binding_row)
_WIDE_TEMPLATE: list[Column] = [("Containers", "string", 1), ("Images", "string", 1)]

_PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "Deployment": ([("Name", "string", 0), ("Ready", "string", 0), ("Up-to-date", "integer", 0),
                    ("Available", "integer", 0), ("Age", "string", 0), *_WIDE_TEMPLATE, ("Selector", "string", 1)],
                   _deployment_row),
    "ReplicaSet": ([("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                    ("Ready", "integer", 0), ("Age", "string", 0), *_WIDE_TEMPLATE, ("Selector", "string", 1)],
                   _replica_set_row),
    "StatefulSet": ([("Name", "string", 0), ("Ready", "string", 0), ("Age", "string", 0), *_WIDE_TEMPLATE],
                    _stateful_set_row),
    "DaemonSet": ([("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                   ("Ready", "integer", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                   ("Node Selector", "string", 0), ("Age", "string", 0), *_WIDE_TEMPLATE,
                   ("Selector", "string", 1)], _daemon_set_row),
    "Endpoints": ([("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)], _endpoints_row),
    "EndpointSlice": ([("Name", "string", 0), ("AddressType", "string", 0), ("Ports", "string", 0),
                       ("Endpoints", "string", 0), ("Age", "string", 0)], _endpoint_slice_row),
    "PersistentVolume": ([("Name", "string", 0), ("Capacity", "string", 0), ("Access Modes", "string", 0),
                          ("Reclaim Policy", "string", 0), ("Status", "string", 0), ("Claim", "string", 0),
                          ("StorageClass", "string", 0), ("VolumeAttributesClass", "string", 0),
                          ("Reason", "string", 0), ("Age", "string", 0), ("VolumeMode", "string", 1)], _pv_row),
    "StorageClass": ([("Name", "string", 0), ("Provisioner", "string", 0), ("ReclaimPolicy", "string", 0),
                      ("VolumeBindingMode", "string", 0), ("AllowVolumeExpansion", "string", 0),
                      ("Age", "string", 0)], _storage_class_row),
    "PodDisruptionBudget": ([("Name", "string", 0), ("Min Available", "string", 0),
                             ("Max Unavailable", "string", 0), ("Allowed Disruptions", "integer", 0),
                             ("Age", "string", 0)], _pdb_row),
    "NetworkPolicy": ([("Name", "string", 0), ("Pod-Selector", "string", 0), ("Age", "string", 0)],
                      _network_policy_row),
    "Pod": _POD,
    "Node": _NODE,
    "Namespace": ([("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)], _namespace_row),
    "Event": ([("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0), ("Object", "string", 0),
               ("Message", "string", 0), ("Subobject", "string", 1), ("Source", "string", 1),
               ("First Seen", "string", 1), ("Count", "string", 1), ("Name", "string", 1)], _event_row),
    "PersistentVolumeClaim": ([("Name", "string", 0), ("Status", "string", 0), ("Volume", "string", 0),
                               ("Capacity", "string", 0), ("Access Modes", "string", 0),
                               ("StorageClass", "string", 0), ("VolumeAttributesClass", "string", 0),
                               ("Age", "string", 0), ("VolumeMode", "string", 1)], _pvc_row),
    "Service": ([("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                 ("External-IP", "string", 0), ("Port(s)", "string", 0), ("Age", "string", 0),
                 ("Selector", "string", 1)], _service_row),
    "Secret": ([("Name", "string", 0), ("Type", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)],
               _secret_row),
    "ConfigMap": ([("Name", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)], _configmap_row),
    "ServiceAccount": ([("Name", "string", 0), ("Secrets", "integer", 0), ("Age", "string", 0)],
                       _service_account_row),
    "Role": _ROLE,
    "ClusterRole": _ROLE,
    "RoleBinding": _BINDING,
    "ClusterRoleBinding": _BINDING,
    "PriorityClass": ([("Name", "string", 0), ("Value", "integer", 0), ("Global-Default", "boolean", 0),
                       ("Age", "string", 0), ("PreemptionPolicy", "string", 0)], _priority_class_row),
}
