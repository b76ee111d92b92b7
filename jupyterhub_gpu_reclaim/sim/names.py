"""How a pod finds Services: the kubelet's service environment variables, and a hosts
file that stands in for cluster DNS.

- `service_env`: for each Service with a cluster IP in the pod's namespace that exists
  when a container starts (when `enableServiceLinks` is true, the default), exactly the
  variables pkg/kubelet/envvars makes: `{NAME}_SERVICE_HOST`, `{NAME}_SERVICE_PORT`,
  `{NAME}_SERVICE_PORT_{PORT}` for named ports, and Docker-link style `{NAME}_PORT`,
  `{NAME}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]` (NAME: upper case, `-` → `_`). The
  container's own `env` wins over them and may refer to them with `$(VAR)`.
- `hosts_file`: the kubelet-managed `/etc/hosts` of a pod (localhost lines, the pod's own
  hostname at its IP) plus one line per Service with a cluster IP: in the pod's namespace
  `name name.ns name.ns.svc name.ns.svc.cluster.local`, in other namespaces the qualified
  forms only, as cluster DNS answers them (the resolver's search path in a pod makes
  `hub` mean `hub.<ns>.svc.cluster.local`). Headless Services list their ready pods
  (`pod-hostname.service.ns.svc...` and the service name). The kubelet bind-mounts it over
  `/etc/hosts` in the pod's mount namespace and rewrites it in place when Services change
  (`HostsFiles`), so names created after the pod started resolve too.

Not simulated: SRV records, ExternalName CNAMEs, `dnsPolicy`/`dnsConfig`, names of pods by
IP (`1-2-3-4.ns.pod`), resolution where no mount namespace can be made (non-root).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .resources import BY_KIND
from .store import Change, Obj

log = logging.getLogger("jupyterhub_gpu_reclaim.sim.names")

SVC, EP = BY_KIND["Service"], BY_KIND["Endpoints"]
CLUSTER_DOMAIN = "cluster.local"
_HOSTS_HEADER = """# Kubernetes-managed hosts file.
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
"""


def _cluster_ip(svc: Obj) -> str | None:
    ip = (svc.get("spec") or {}).get("clusterIP")
    return ip if ip and ip != "None" else None


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_env(store: Any, namespace: str, enable_service_links: bool = True) -> dict[str, str]:
    """The variables the kubelet sets for the Services visible to a pod of `namespace`."""
    env: dict[str, str] = {}
    if not enable_service_links:
        return env
    services = [s for s in store.objects(SVC) if s["metadata"].get("namespace") == namespace]
    for svc in sorted(services, key=lambda s: s["metadata"]["name"]):
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


def hosts_file(store: Any, pod: Obj, pod_ip: str | None) -> str:
    """The pod's /etc/hosts: the kubelet's own lines and the Services' names."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    ns = meta["namespace"]
    lines = [_HOSTS_HEADER]
    hostname = spec.get("hostname") or meta["name"]
    if pod_ip:
        if spec.get("subdomain"):
            fqdn = f"{hostname}.{spec['subdomain']}.{ns}.svc.{CLUSTER_DOMAIN}"
            lines.append(f"{pod_ip}\t{fqdn}\t{hostname}\n")
        else:
            lines.append(f"{pod_ip}\t{hostname}\n")
    lines.append("\n# Services (the simulator's stand-in for cluster DNS)\n")
    for svc in sorted(store.objects(SVC), key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        sns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        qualified = [f"{name}.{sns}", f"{name}.{sns}.svc", f"{name}.{sns}.svc.{CLUSTER_DOMAIN}"]
        names = ([name] if sns == ns else []) + qualified
        ip = _cluster_ip(svc)
        if ip is not None:
            lines.append(f"{ip}\t{' '.join(names)}\n")
            continue
        endpoints = store.find(EP, sns, name) or {}
        for subset in endpoints.get("subsets") or []:
            for a in subset.get("addresses") or []:
                extra = []
                if a.get("hostname"):
                    extra = [f"{a['hostname']}.{q}" for q in qualified]
                lines.append(f"{a['ip']}\t{' '.join(extra + names)}\n")
    return "".join(lines)


def write_in_place(path: Path, text: str) -> None:
    """Rewrite a file keeping its inode, so a bind mount of it shows the new content."""
    with open(path, "r+" if path.exists() else "w") as f:
        f.seek(0)
        f.write(text)
        f.truncate()


class HostsFiles:
    """The hosts files of the running pods, kept current as Services change.

    The kubelet `register`s a pod's file when its first container starts (and mounts it
    at /etc/hosts) and `unregister`s it when the pod stops."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._files: dict[str, tuple[Obj, str | None, Path]] = {}  # pod uid -> (pod, ip, path)
        self._unsubscribe = [store.subscribe(SVC, self._on_change), store.subscribe(EP, self._on_headless)]

    def register(self, pod: Obj, pod_ip: str | None, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._files[pod["metadata"]["uid"]] = (pod, pod_ip, path)
        write_in_place(path, hosts_file(self.store, pod, pod_ip))
        return path

    def unregister(self, pod_uid: str) -> None:
        self._files.pop(pod_uid, None)

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._files.clear()

    def _on_change(self, change: Change) -> None:
        old, new = change.old, change.new
        if change.type == "MODIFIED" and old is not None and _cluster_ip(old) == _cluster_ip(new):
            return  # status and label changes do not change any name
        self._rewrite()

    def _on_headless(self, change: Change) -> None:
        svc = self.store.find(SVC, change.new["metadata"].get("namespace"), change.new["metadata"]["name"])
        if svc is not None and _cluster_ip(svc) is None:
            self._rewrite()

    def _rewrite(self) -> None:
        for uid, (pod, ip, path) in list(self._files.items()):
            try:
                write_in_place(path, hosts_file(self.store, pod, ip))
            except OSError as e:
                log.warning("hosts file of pod %s: %s", uid, e)
