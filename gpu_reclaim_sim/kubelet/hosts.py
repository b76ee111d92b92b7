"""A pod's name on its network: its hostname (and domain), and the /etc/hosts file the
kubelet writes for it, in the kubelet's own format (pkg/kubelet/kubelet_pods.go)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

CLUSTER_DOMAIN = "cluster.local"
# Where a container sees the directory of its pod's hosts file (read-only); its /etc/hosts
# is a link to the file there (sim.kubelet.sandbox), so that the file can be replaced whole.
NAMES_DIR = "/run/kubernetes-names"
HEADER = "# Kubernetes-managed hosts file.\n"
_LOCAL = ("127.0.0.1\tlocalhost\n"
          "::1\tlocalhost ip6-localhost ip6-loopback\n"
          "fe00::0\tip6-localnet\n"
          "fe00::0\tip6-mcastprefix\n"
          "fe00::1\tip6-allnodes\n"
          "fe00::2\tip6-allrouters\n")

HostEntries = Iterable[tuple[str, Iterable[str]]]  # (address, names)


def pod_hostname(pod: dict[str, Any]) -> tuple[str, str]:
    """(hostname, domain) as the kubelet gives them: `spec.hostname` or the pod's name cut
    to 63 characters (without a trailing `-` or `.`); with `spec.subdomain` the domain is
    `<subdomain>.<namespace>.svc.cluster.local`, else empty."""
    spec, meta = pod.get("spec", {}), pod["metadata"]
    name = spec.get("hostname") or meta["name"][:63].rstrip("-.")
    sub = spec.get("subdomain")
    return name, f"{sub}.{meta['namespace']}.svc.{CLUSTER_DOMAIN}" if sub else ""


def hosts_file(pod: dict[str, Any], ip: str, services: HostEntries = ()) -> str:
    """The pod's /etc/hosts: localhost, the pod's own name at its IP, the pod's
    `hostAliases`, then `services` — (address, names) lines for the emulation of cluster
    DNS (`sim.kubelet.names.service_entries`; a real pod asks CoreDNS, here Service names are
    resolved through this file, which `sim.kubelet.names.HostsFiles` rewrites as they change)."""
    name, domain = pod_hostname(pod)
    own = f"{ip}\t{name}.{domain}\t{name}\n" if domain else f"{ip}\t{name}\n"
    text = HEADER + _LOCAL + own
    aliases = pod.get("spec", {}).get("hostAliases") or []
    if aliases:
        text += "\n# Entries added by HostAliases.\n"
        text += "".join(f"{a['ip']}\t{chr(9).join(a.get('hostnames') or [])}\n" for a in aliases)
    entries = [(address, list(names)) for address, names in services]
    if entries:
        text += "\n# Entries for Services (the simulator's stand-in for cluster DNS).\n"
        text += "".join(f"{address}\t{chr(9).join(names)}\n" for address, names in entries)
    return text


def write(path: Path, content: str) -> None:
    """Write (or rewrite) a pod's hosts file: a new file renamed over the old one, so that
    a lookup in the pod reads the old file or the new one, never a half-written one (a
    rewrite in place, under a bind mount of the file, let a lookup made while a Service
    was created elsewhere find no name at all). `mkstemp` creates the new file without
    following a link the pod might have left in the directory."""
    try:
        if path.read_text() == content:
            return
    except FileNotFoundError:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd, new = tempfile.mkstemp(dir=path.parent, prefix=".hosts-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
        os.chmod(new, 0o644)  # read by the container's user
        os.replace(new, path)
    except BaseException:
        os.unlink(new)
        raise
