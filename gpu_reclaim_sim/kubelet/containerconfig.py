"""What a container of a pod starts with, as the kubelet works it out before the runtime
runs it (kuberuntime's generateContainerConfig, with makeEnvironmentVariables and
makeMounts): the command line from the pod's command and args over the image's
entrypoint and cmd, the environment (the image's, Service variables, GPU devices, the
pod's own with `valueFrom` and `$(VAR)` expansion) and the mounts. `PodWorker` decides
when a container starts; this module, with what."""

from __future__ import annotations

import base64
import os
import re
import sys
from pathlib import Path
from typing import Any, Protocol

from . import hosts, names, runtime, volumes
from .podapi import PodApi
from ..paths import REPO
from ..objects import Obj

READ_ONLY_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")  # always mounted read-only


class Node(Protocol):
    """What a container's configuration reads of its node's kubelet."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...


class PodWorker(Protocol):
    """What a container's configuration reads of its pod's worker (podworker.PodWorker, which
    imports this module: a protocol, so the two do not import each other)."""

    pod: Obj
    ns: str
    name: str
    uid: str
    ip: str | None
    dir: Path
    volume_paths: dict[str, Path]
    cluster: Any
    api: PodApi

    @property
    def kubelet(self) -> Node: ...
    def lookup(self, kind: str, name: str) -> Obj | None: ...


class ContainerError(Exception):
    """A container that cannot be created; the reason shows in its waiting state."""


CONFIG_ERROR = "CreateContainerConfigError"  # what its environment refers to is missing (tried again)


async def start(worker: PodWorker, c: Obj, image: Any, gpu_uuids: str | None, cid: str) -> runtime.ContainerProcess:
    """Run container `c` of the worker's pod in a sandbox, its output to the pod's log."""
    env = environment(worker, c, image.env, gpu_uuids)
    argv = command_line(c, image, env)
    sc = c.get("securityContext") or {}
    try:
        container_mounts = mounts(worker.pod, c, env, worker.volume_paths, worker.dir)
        # the image's programs, each this machine's at its path in the image
        container_mounts += [{"source": command[0], "target": path, "readonly": True}
                             for path, command in image.programs.items()]
    except volumes.MountError as e:
        raise runtime.StartError(str(e)) from None
    box = runtime.Sandbox(
        argv=[rewrite(a, worker.ip) for a in argv],
        workdir=c.get("workingDir") or image.working_dir or "/",
        hostname=hosts.pod_hostname(worker.pod)[0],
        identity=runtime.identity(worker.pod, c, image),
        mounts=container_mounts,
        directory=worker.dir / "containers" / c["name"],
        caps=runtime.capabilities(c),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        readonly_root=bool(sc.get("readOnlyRootFilesystem")),
        keep=sorted({sys.prefix, sys.base_prefix, str(REPO)}),  # an editable install runs from REPO
    )
    log_path = worker.cluster.pod_log_path(worker.ns, worker.name, c["name"])
    return await runtime.start(box, env, log_path, worker.uid, cid)


def command_line(c: Obj, image: Any, env: dict[str, str]) -> list[str]:
    """Kubernetes' rule: command replaces ENTRYPOINT, args replace CMD; the kubelet expands
    $(VAR) in the pod's command and args (not in the image's)."""
    command = [expand(a, env) for a in c.get("command") or []]
    args = [expand(a, env) for a in c.get("args") or []]
    argv = command + args if command else list(image.entrypoint) + (args or list(image.cmd))
    if not argv:
        raise runtime.StartError("no command specified")
    return [argv[0], *image.programs[argv[0]][1:], *argv[1:]] if argv[0] in image.programs else argv


def rewrite(value: str, ip: str | None) -> str:
    """A container listening on every interface listens on the pod's own address here."""
    return value.replace("0.0.0.0", ip or "127.0.0.1")


def expand(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` references to earlier variables, as Kubernetes expands them; `$$` escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def environment(worker: PodWorker, c: Obj, image_env: dict[str, str], gpu_uuids: str | None) -> dict[str, str]:
    pod, cluster = worker.pod, worker.cluster
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOSTNAME": hosts.pod_hostname(pod)[0],
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        **image_env,
    }
    env.update(names.service_env(worker.api.services(worker.ns), worker.ns, pod["spec"].get("enableServiceLinks", True)))
    if gpu_uuids:
        env["NVIDIA_VISIBLE_DEVICES"] = gpu_uuids
        env.update(cluster.control.pod_env(worker.ns, worker.name, worker.uid))
    for e in c.get("env", []):
        value = e.get("value")
        if "valueFrom" in e:
            value = _value_from(worker, e["valueFrom"], c)
        env[e["name"]] = rewrite(expand(value or "", env), worker.ip)
    return env


def _value_from(worker: PodWorker, src: Obj, c: Obj) -> str:
    if "fieldRef" in src:
        pod = {**worker.pod, "status": {**worker.pod.get("status", {}), "podIP": worker.ip or "",
                                        "hostIP": worker.kubelet.address}}
        return volumes.downward_field(pod, src["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in src:
        node = worker.api.node(worker.kubelet.name) or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        return volumes.resource_field(worker.pod, c["name"], src["resourceFieldRef"], allocatable)
    for kind, key in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
        if kind in src:
            ref = src[kind]
            data = (worker.lookup(key, ref["name"]) or {}).get("data") or {}
            if ref["key"] not in data:
                if ref.get("optional"):
                    return ""
                raise ContainerError(CONFIG_ERROR)
            value = data[ref["key"]]
            return base64.b64decode(value).decode() if key == "Secret" else value
    return ""


def mounts(pod: Obj, c: Obj, env: dict[str, str], volume_paths: dict[str, Path], pod_dir: Path) -> list[dict[str, Any]]:
    """What the container mounts: its volumes (set up at `volume_paths`, or a `subPath` of
    one: a file or a directory), read-only where the volume is; and the pod's /etc/hosts
    and /etc/hostname (in `pod_dir`) unless it mounts its own: /etc/hosts as a link into
    its directory, mounted read-only at `hosts.NAMES_DIR` (`hosts.write` replaces the file)."""
    vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    out = []
    for vm in c.get("volumeMounts", []):
        vol = vols.get(vm["name"])
        if vol is None or vm["name"] not in volume_paths:
            continue
        source = volume_paths[vm["name"]]
        sub = vm.get("subPath") or expand(vm.get("subPathExpr") or "", env)
        if sub:
            source = volumes.subpath_source(source, sub)
        readonly = bool(vm.get("readOnly")) or any(k in vol for k in READ_ONLY_VOLUMES) \
            or bool((vol.get("persistentVolumeClaim") or {}).get("readOnly"))
        out.append({"source": str(source), "target": vm["mountPath"], "readonly": readonly})
    taken = {m["target"] for m in out}
    if "/etc/hosts" not in taken:
        out.append({"source": str(pod_dir / "names"), "target": hosts.NAMES_DIR, "readonly": True,
                    "links": {"/etc/hosts": "hosts"}})
    if "/etc/hostname" not in taken:
        out.append({"source": str(pod_dir / "etc-hostname"), "target": "/etc/hostname", "readonly": False})
    return out
