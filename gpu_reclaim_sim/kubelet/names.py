"""How a pod finds Services: the kubelet's service environment variables, and a hosts
file that stands in for cluster DNS.

- `service_env`: for the `kubernetes` Service in `default` (kept by kube-apiserver: how
  in-cluster configuration finds the API server) and, when `enableServiceLinks` is true (the
  default), each Service with a cluster IP in the pod's namespace that exists when a
  container starts, exactly the variables pkg/kubelet/envvars makes: `{NAME}_SERVICE_HOST`, `{NAME}_SERVICE_PORT`,
  `{NAME}_SERVICE_PORT_{PORT}` for named ports, and Docker-link style `{NAME}_PORT`,
  `{NAME}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]` (NAME: upper case, `-` → `_`). The
  container's own `env` wins over them and may refer to them with `$(VAR)`.
- `service_entries`: the Service lines of a pod's `/etc/hosts` (the file itself, with the
  pod's own name, is `sim.kubelet.hosts.hosts_file`): one line per Service with a cluster IP: in
  the pod's namespace `name name.ns name.ns.svc name.ns.svc.cluster.local`, in other
  namespaces the qualified forms only, as cluster DNS answers them (the resolver's search
  path in a pod makes `hub` mean `hub.<ns>.svc.cluster.local`). Headless Services list
  their ready pods (`pod-hostname.service.ns.svc...` and the service name).
- `HostsFiles`: the hosts files of the running pods, rewritten in place when Services
  change, so names created after a pod started resolve too. Each is replaced whole
  (`hosts.write`); a container sees it through the link `/etc/hosts`.

Not simulated: SRV records, ExternalName CNAMEs, `dnsPolicy`/`dnsConfig`, names of pods by
IP (`1-2-3-4.ns.pod`), resolution where no mount namespace can be made (non-root).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .hosts import CLUSTER_DOMAIN, hosts_file, write
from ..resources import BY_KIND
from ..objects import Change, Obj

log = logging.getLogger("gpu_reclaim_sim.kubelet.names")

SVC, EP = BY_KIND["Service"], BY_KIND["Endpoints"]
API_SERVICE = ("default", "kubernetes")  # (namespace, name) of the Service every pod sees


def _cluster_ip(svc: Obj) -> str | None:
    ip = (svc.get("spec") or {}).get("clusterIP")
    return ip if ip and ip != "None" else None


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_env(services: Iterable[Obj], namespace: str, enable_service_links: bool = True) -> dict[str, str]:
    """The variables the kubelet sets for the Services visible to a pod of `namespace`, of
    `services` (at least those of `namespace` and `default`): the `kubernetes` Service of
    `default` always (unless the pod's namespace has its own), the namespace's Services unless
    `enable_service_links` is false (getServiceEnvVarMap)."""
    visible: dict[str, Obj] = {}
    for svc in services:
        meta = svc["metadata"]
        if _cluster_ip(svc) is None:
            continue
        if (meta.get("namespace"), meta["name"]) == API_SERVICE:
            visible.setdefault(meta["name"], svc)
        elif meta.get("namespace") == namespace and enable_service_links:
            visible[meta["name"]] = svc
    env: dict[str, str] = {}
    for svc in sorted(visible.values(), key=lambda s: s["metadata"]["name"]):
        ip, ports = _cluster_ip(svc), (svc.get("spec") or {}).get("ports") or []
        if ip is None or not ports:
            continue
        name = _env_name(svc["metadata"]["name"])
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{name}_SERVICE_PORT_{_env_name(p['name'])}"] = str(p["port"])
        for i, p in enumerate(ports):
            protocol = p.get("protocol") or "TCP"
            url = f"{protocol.lower()}://{ip}:{p['port']}"
            if i == 0:
                env[f"{name}_PORT"] = url
            prefix = f"{name}_PORT_{p['port']}_{protocol.upper()}"
            env[prefix] = url
            env[f"{prefix}_PROTO"] = protocol.lower()
            env[f"{prefix}_PORT"] = str(p["port"])
            env[f"{prefix}_ADDR"] = ip
    return env


def service_entries(store: Any, namespace: str) -> list[tuple[str, list[str]]]:
    """The Service lines of the hosts file of a pod in `namespace` (`sim.kubelet.hosts.hosts_file`
    writes them): (address, names) for every Service with a cluster IP, and for each ready
    pod of a headless one."""
    entries = []
    for svc in sorted(store.objects(SVC), key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        sns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        qualified = [f"{name}.{sns}", f"{name}.{sns}.svc", f"{name}.{sns}.svc.{CLUSTER_DOMAIN}"]
        names = ([name] if sns == namespace else []) + qualified
        ip = _cluster_ip(svc)
        if ip is not None:
            entries.append((ip, names))
            continue
        endpoints = store.find(EP, sns, name) or {}
        for subset in endpoints.get("subsets") or []:
            for a in subset.get("addresses") or []:
                own = [f"{a['hostname']}.{q}" for q in qualified] if a.get("hostname") else []
                entries.append((a["ip"], own + names))
    return entries


class HostsFiles:
    """The hosts files of the running pods, kept current as Services change.

    The kubelet `register`s a pod's file once the pod has its IP (its containers see it
    at /etc/hosts) and `unregister`s it when the pod stops."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._files: dict[str, tuple[Obj, str, Path]] = {}  # pod uid -> (pod, ip, path)
        self._unsubscribe = [store.subscribe(SVC, self._on_change), store.subscribe(EP, self._on_headless)]

    def register(self, pod: Obj, pod_ip: str, path: Path) -> None:
        self._files[pod["metadata"]["uid"]] = (pod, pod_ip, path)
        write(path, self._render(pod, pod_ip, {}))

    def unregister(self, pod_uid: str) -> None:
        self._files.pop(pod_uid, None)

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._files.clear()

    def _render(self, pod: Obj, ip: str, entries: dict[str, list[tuple[str, list[str]]]]) -> str:
        """`entries`: the Service lines already built for a namespace (one rewrite of many
        pods builds them once per namespace)."""
        ns = pod["metadata"]["namespace"]
        if ns not in entries:
            entries[ns] = service_entries(self.store, ns)
        return hosts_file(pod, ip, entries[ns])

    def _on_change(self, change: Change) -> None:
        old, new = change.old, change.new
        if change.type == "MODIFIED" and old is not None and _cluster_ip(old) == _cluster_ip(new):
            return  # status and label changes do not change any name
        self._rewrite()

    def _on_headless(self, change: Change) -> None:
        if not self._files:
            return
        svc = self.store.find(SVC, change.new["metadata"].get("namespace"), change.new["metadata"]["name"])
        if svc is not None and _cluster_ip(svc) is None:
            self._rewrite()

    def _rewrite(self) -> None:
        entries: dict[str, list[tuple[str, list[str]]]] = {}
        for uid, (pod, ip, path) in list(self._files.items()):
            try:
                write(path, self._render(pod, ip, entries))
            except OSError as e:
                log.warning("hosts file of pod %s: %s", uid, e)
