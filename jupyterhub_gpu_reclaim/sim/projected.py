"""The kubelet's projected volumes: a service account token bound to the pod, ConfigMap
and Secret keys, and downward API fields, written into one directory (what the
ServiceAccount admission plugin's `kube-api-access-xxxxx` volume needs).

The token is asked for once, when the volume is set up; the kubelet's refresh at 80 % of
its lifetime is not simulated (the 3607 s a pod's token asks for is extended to a year).
A missing ConfigMap or Secret leaves its files out instead of failing the mount.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from .resources import BY_KIND
from .store import Obj

SA, CONFIGMAP, SECRET = BY_KIND["ServiceAccount"], BY_KIND["ConfigMap"], BY_KIND["Secret"]


def write(cluster: Any, pod: Obj, spec: Obj, path: Path) -> None:
    """Fill `path` with the projected volume `spec` of `pod`."""
    meta = pod["metadata"]
    ns = meta["namespace"]
    mode = spec.get("defaultMode", 420)
    path.mkdir(parents=True, exist_ok=True)
    for source in spec.get("sources") or []:
        if "serviceAccountToken" in source:
            src = source["serviceAccountToken"]
            account = cluster.store.find(SA, ns, pod["spec"].get("serviceAccountName") or "default")
            if account is None:
                continue
            audience = src.get("audience")
            token, _ = cluster.apiserver.tokens.issue(account, audiences=[audience] if audience else None,
                                                      expiration_seconds=src.get("expirationSeconds", 3600),
                                                      bound=pod)
            _put(path, src["path"], token.encode(), mode)
        for kind, rtype, key in (("configMap", CONFIGMAP, "name"), ("secret", SECRET, "name")):
            if kind not in source:
                continue
            src = source[kind]
            obj = cluster.store.find(rtype, ns, src.get(key) or "") or {}
            data = {k: base64.b64decode(v) if kind == "secret" else v.encode()
                    for k, v in (obj.get("data") or {}).items()}
            items = src.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] in data:
                    _put(path, item["path"], data[item["key"]], item.get("mode", mode))
        if "downwardAPI" in source:
            for item in source["downwardAPI"].get("items") or []:
                field = (item.get("fieldRef") or {}).get("fieldPath")
                if field:
                    _put(path, item["path"], _field(pod, field).encode(), item.get("mode", mode))


def _field(pod: Obj, field: str) -> str:
    meta = pod["metadata"]
    if field in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(meta.get(field.split(".", 1)[1], ""))
    if field in ("metadata.labels", "metadata.annotations"):
        values = meta.get(field.split(".", 1)[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    return ""


def _put(root: Path, relative: str, data: bytes, mode: int) -> None:
    target = (root / relative).resolve()
    if root.resolve() not in target.parents:  # items' paths may not leave the volume
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    os.chmod(target, mode)
