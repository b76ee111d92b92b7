"""A simulated kubelet: one per node. It registers the Node, pulls images (one at a time,
as the kubelet's default serializeImagePulls does), starts each bound pod's containers as
real local processes (process mode) or not at all (stub mode), reports pod status and
events in the real kubelet's words, and stops containers with SIGTERM, then SIGKILL after
the grace period, before removing the pod object.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from . import errors, projected
from .images import normalize, repo_digest
from .nodes import MAX_IMAGES, node_manifest
from .resources import BY_KIND
from .sandbox import SPEC_ENV
from .scenario import NodeGroup
from .store import Filter, Obj
from .timestamps import rfc3339

log = logging.getLogger("jupyterhub_gpu_reclaim.sim.kubelet")

POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]
GPU = "nvidia.com/gpu"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # an editable install runs from here
MAX_BACKOFF = 300.0  # CrashLoopBackOff's cap


def sandbox_available() -> bool:
    """Pods get their own /tmp and volume mounts only where mount namespaces are allowed."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("mount") is not None


class Kubelet:
    def __init__(self, cluster: Any, name: str, group: NodeGroup) -> None:
        self.cluster = cluster
        self.name = name
        self.group = group
        self.images: set[str] = {normalize(i) for i in group.images}
        self.address = ""
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self._pull_lock = asyncio.Lock()

    @property
    def store(self):
        return self.cluster.store

    async def start(self) -> None:
        self.address = self.cluster.network.nodes.allocate()
        node = node_manifest(self.name, self.group, self.cluster.scenario, self.cluster.images, self.address)
        self.cluster.create(NODE, node)
        if self.group.gpus:
            self.cluster.gpus.add_node(self.name, self.group.gpus, self.group.gpu_model,
                                       self.group.gpu_memory_mib)
        self.store.kubelet_nodes.add(self.name)
        log.info("node %s registered (%s)", self.name, self.address)

    async def stop(self, delete_node: bool) -> None:
        self.store.kubelet_nodes.discard(self.name)
        await asyncio.gather(*(w.shutdown(grace=2) for w in list(self.workers.values())))
        if delete_node:
            for pod in self.store.list(Filter(POD, field_selector=f"spec.nodeName={self.name}"))[0]:
                _remove_pod(self.store, pod)  # the pod garbage collector's job for a gone node
            if self.store.find(NODE, None, self.name):
                self.store.remove(NODE, None, self.name)
        self.cluster.gpus.remove_node(self.name)
        self.cluster.network.nodes.release(self.address)

    def on_pod(self, type_: str, pod: Obj) -> None:
        """A change to a pod bound to this node (the cluster routes them: one watch for
        all kubelets instead of one each keeps every store write cheap at scale)."""
        try:
            self._on_pod(type_, pod)
        except Exception:  # one bad pod must not stop the node
            log.exception("node %s: handling pod %s", self.name, pod["metadata"].get("name"))

    def _on_pod(self, type_: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if type_ == "DELETED":
            if worker:
                worker.request_stop(grace=0)
            return
        if worker is None:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
                return
            worker = self.workers[uid] = PodWorker(self, pod)
            worker.task = asyncio.create_task(worker.run())
        if pod["metadata"].get("deletionTimestamp"):
            worker.request_stop(grace=pod["metadata"].get("deletionGracePeriodSeconds", 30))

    # --- images ----------------------------------------------------------------------

    async def pull(self, worker: "PodWorker", container: Obj) -> None:
        """Make the container's image present, with the kubelet's events."""
        ref = container["image"]
        policy = container.get("imagePullPolicy", "IfNotPresent")
        present = normalize(ref) in self.images
        if present and policy != "Always":
            worker.event("Pulled", f'Container image "{ref}" already present on machine', container)
            return
        if policy == "Never":
            worker.event("ErrImageNeverPull",
                         f'Container image "{ref}" is not present with pull policy of Never', container, "Warning")
            raise ContainerError("ErrImageNeverPull")
        queued = time.monotonic()
        # as the kubelet: the event first, then the node's serialized image puller
        worker.event("Pulling", f'Pulling image "{ref}"', container)
        async with self._pull_lock:
            started = time.monotonic()
            size = self.cluster.images.size(ref)
            # an image already here still costs a manifest check with policy Always
            await asyncio.sleep(0.1 if normalize(ref) in self.images else size / self.group.bandwidth)
            self._add_image(ref)
        done = time.monotonic()
        worker.event("Pulled", f'Successfully pulled image "{ref}" in {_go_duration(done - started)} '
                     f'({_go_duration(done - queued)} including waiting). Image size: {size} bytes.', container)

    def _add_image(self, ref: str) -> None:
        self.images.add(normalize(ref))
        entry = self.cluster.images.status_entry(ref)

        def add(node: Obj) -> None:
            images = [i for i in node["status"].get("images", []) if normalize(ref) not in i["names"]]
            node["status"]["images"] = sorted(images + [entry], key=lambda e: -e["sizeBytes"])[:MAX_IMAGES]

        self.store.update(NODE, None, self.name, add)


class ContainerError(Exception):
    """A container that cannot start; the reason shows in its waiting state."""


class PodWorker:
    """Runs one pod on a node from binding to removal."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.cluster = kubelet.cluster
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.task: asyncio.Task | None = None
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.ip: str | None = None
        self.dir = self.cluster.data_dir / "pods" / self.ns / f"{self.name}-{self.uid[:8]}"
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._life: asyncio.Task | None = None
        self._released = False
        self._restarts: dict[str, int] = {}
        self._container_ids: dict[str, str] = {}
        self._started_at: dict[str, str] = {}

    # --- status and events -----------------------------------------------------------

    def event(self, reason: str, message: str, container: Obj | None = None, type_: str = "Normal") -> None:
        field_path = f"spec.containers{{{container['name']}}}" if container else None
        current = self.cluster.store.find(POD, self.ns, self.name) or self.pod
        self.cluster.events.record(current, reason, message, type_=type_, component="kubelet",
                                   host=self.kubelet.name, field_path=field_path)

    def update_status(self, mutate) -> None:
        store = self.cluster.store
        current = store.find(POD, self.ns, self.name)
        if current is None or current["metadata"]["uid"] != self.uid:
            return

        def apply(o: Obj) -> None:
            mutate(o.setdefault("status", {}))

        self.pod = store.update(POD, self.ns, self.name, apply)

    # --- lifecycle -------------------------------------------------------------------

    def request_stop(self, grace: float) -> None:
        self._grace = min(self._grace, float(grace)) if self._stop.is_set() else float(grace)
        self._stop.set()

    async def run(self) -> None:
        self._life = asyncio.create_task(self._lifecycle())
        await self._stop.wait()
        # a container still being pulled never starts; one that runs gets its grace period
        self._life.cancel()
        await asyncio.gather(self._life, return_exceptions=True)
        for c in self._containers():
            proc = self.procs.get(c["name"])
            if proc is not None and proc.returncode is None:
                self.event("Killing", f"Stopping container {c['name']}", c)
        await self.shutdown(self._grace)
        _remove_pod(self.cluster.store, self.pod)
        self.kubelet.workers.pop(self.uid, None)

    async def shutdown(self, grace: float) -> None:
        """SIGTERM every container process, SIGKILL what is left after `grace` seconds."""
        procs = [p for p in self.procs.values() if p.returncode is None]
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        if procs:
            try:
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), max(grace, 0.1))
            except asyncio.TimeoutError:
                for p in procs:
                    _signal_group(p, signal.SIGKILL)
                await asyncio.gather(*(p.wait() for p in procs))
        self.release()

    def release(self) -> None:
        """Give back the pod's GPUs, address and scratch space (its PVCs stay)."""
        if self._released:
            return
        self._released = True
        self.cluster.gpus.release(self.ns, self.name)
        self.cluster.network.pods.release(self.ip)
        shutil.rmtree(self.dir / "scratch", ignore_errors=True)

    def _containers(self) -> list[Obj]:
        return self.pod["spec"].get("containers", [])

    async def _lifecycle(self) -> None:
        try:
            await self._run_pod()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must show, not leave the pod silently Pending
            log.exception("node %s: pod %s/%s", self.kubelet.name, self.ns, self.name)
            self.update_status(lambda s: s.update({"phase": "Failed", "reason": "InternalError"}))

    async def _run_pod(self) -> None:
        spec = self.pod["spec"]
        self.ip = self.cluster.network.pods.allocate()
        gpu_env: dict[str, str] = {}
        for c in self._containers():
            count = int(str((c.get("resources", {}).get("limits") or {}).get(GPU, 0)) or 0)
            if not count:
                continue
            try:
                gpus = self.cluster.gpus.allocate(self.kubelet.name, self.ns, self.name, c["name"], count)
            except RuntimeError:  # the device plugin's admission failure, in the kubelet's words
                message = (f"Allocate failed due to requested number of devices unavailable for {GPU}. "
                           f"Requested: {count}, Available: {len(self.cluster.gpus.free(self.kubelet.name))}, which is unexpected")
                self.event("UnexpectedAdmissionError", message, type_="Warning")
                self.update_status(lambda s: s.update({"phase": "Failed", "reason": "UnexpectedAdmissionError",
                                                       "message": message}))
                self.release()
                return
            gpu_env[c["name"]] = ",".join(g.uuid for g in gpus)
        start = rfc3339()
        self.update_status(lambda s: s.update({
            "hostIP": self.kubelet.address, "hostIPs": [{"ip": self.kubelet.address}],
            "startTime": start, "qosClass": s.get("qosClass", "BestEffort"),
            "conditions": _conditions(self.pod, initialized=not spec.get("initContainers"), ready=False),
            "containerStatuses": [_waiting(c, "ContainerCreating") for c in self._containers()],
        }))
        try:
            for c in spec.get("initContainers", []):
                await self.kubelet.pull(self, c)
                code = await (await self._start(c, gpu_env.get(c["name"]))).wait()
                self.procs.pop(c["name"], None)
                if code != 0:
                    raise ContainerError(f"Init:Error (exit code {code})")
            for c in self._containers():
                await self.kubelet.pull(self, c)
            for c in self._containers():
                await self._start(c, gpu_env.get(c["name"]))
        except ContainerError as e:
            reason = str(e).split(" ")[0]
            self.update_status(lambda s: s.update({
                "containerStatuses": [_waiting(c, reason) for c in self._containers()]}))
            return
        self.update_status(lambda s: s.update({
            "phase": "Running", "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "conditions": _conditions(self.pod, initialized=True, ready=True),
            "containerStatuses": [self._running(c) for c in self._containers()],
        }))
        await self._supervise(gpu_env)

    async def _supervise(self, gpu_env: dict[str, str]) -> None:
        """Wait for containers to exit and apply the restart policy (CrashLoopBackOff)."""
        policy = self.pod["spec"].get("restartPolicy", "Always")
        backoff: dict[str, float] = {}
        while self.procs:
            waits = {asyncio.ensure_future(p.wait()): name for name, p in self.procs.items()}
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for f in pending:
                f.cancel()
            for f in done:
                name = waits[f]
                code = f.result()
                c = next(c for c in self._containers() if c["name"] == name)
                restart = policy == "Always" or (policy == "OnFailure" and code != 0)
                self._record_exit(c, code, restart)
                if not restart:
                    del self.procs[name]
                    continue
                delay = backoff[name] = min(backoff.get(name, 5.0) * 2, MAX_BACKOFF)
                self.event("BackOff", "Back-off restarting failed container "
                           f"{name} in pod {self.name}_{self.ns}({self.uid})", c, "Warning")
                await asyncio.sleep(delay)
                self._restarts[name] = self._restarts.get(name, 0) + 1
                self.procs[name] = await self._start(c, gpu_env.get(name))
                self.update_status(lambda s, c=c: _set_container(s, self._running(c)))
        # every container has finished for good
        codes = [cs["state"]["terminated"]["exitCode"] for cs in self.pod["status"]["containerStatuses"]]
        phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        self.update_status(lambda s: s.update({
            "phase": phase, "conditions": _conditions(self.pod, initialized=True, ready=False)}))
        self.release()

    def _record_exit(self, c: Obj, code: int, restarting: bool) -> None:
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": self._started_at.get(c["name"]), "finishedAt": rfc3339(),
                      "containerID": self._container_ids.get(c["name"])}
        status = {**self._running(c), "ready": False, "started": False,
                  "state": {"waiting": {"reason": "CrashLoopBackOff"}} if restarting else {"terminated": terminated},
                  "lastState": {"terminated": terminated} if restarting else {}}
        self.update_status(lambda s: (_set_container(s, status), s.update(
            {"conditions": _conditions(self.pod, initialized=True, ready=False)})))

    def _running(self, c: Obj) -> dict[str, Any]:
        return {**_base_status(c, self._restarts.get(c["name"], 0)), "ready": True, "started": True,
                "containerID": self._container_ids.get(c["name"]),
                "state": {"running": {"startedAt": self._started_at.get(c["name"])}}}

    # --- processes -------------------------------------------------------------------

    async def _start(self, c: Obj, gpu_uuids: str | None) -> asyncio.subprocess.Process | _StubProcess:
        self.event("Created", f"Created container {c['name']}", c)
        cid = uuid.uuid4().hex
        self._container_ids[c["name"]] = f"containerd://{cid}"
        self._started_at[c["name"]] = rfc3339()
        if self.cluster.scenario.mode == "stub" or self.cluster.images.get(c["image"]).stub:
            proc: Any = _StubProcess()
        else:
            proc = await self._exec(c, gpu_uuids)
        self.procs[c["name"]] = proc
        self.event("Started", f"Started container {c['name']}", c)
        return proc

    async def _exec(self, c: Obj, gpu_uuids: str | None) -> asyncio.subprocess.Process:
        image = self.cluster.images.get(c["image"])
        # Kubernetes' rule: command replaces ENTRYPOINT; args replace CMD
        if c.get("command"):
            argv = list(c["command"]) + list(c.get("args", []))
        else:
            argv = list(image.entrypoint) + list(c.get("args", image.cmd if not c.get("args") else []))
        if not argv:
            raise ContainerError("CreateContainerError (no command)")
        env = self._env(c, image.env, gpu_uuids)
        argv = [self._rewrite(a) for a in argv]
        log_path = self.cluster.pod_log_path(self.ns, self.name, c["name"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        mounts = self._mounts(c)
        workdir = c.get("workingDir") or image.working_dir or "/"
        if sandbox_available():
            import json

            env[SPEC_ENV] = json.dumps({
                "argv": argv, "mounts": mounts, "workdir": workdir,
                "keep": sorted({sys.prefix, sys.base_prefix, str(PACKAGE_ROOT), str(self.cluster.data_dir)}),
            })
            cmd = ["unshare", "--mount", "--propagation", "private",
                   sys.executable, "-m", "jupyterhub_gpu_reclaim.sim.sandbox"]
            cwd = "/"
        else:  # no mount namespace: volumes are reachable only at their host paths
            log.warning("pod %s/%s runs without its own /tmp and volume mounts (needs root and unshare)",
                        self.ns, self.name)
            cmd, cwd = argv, next((m["source"] for m in mounts), str(self.dir))
        with open(log_path, "ab") as out:
            return await asyncio.create_subprocess_exec(
                *cmd, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)

    def _rewrite(self, value: str) -> str:
        """A container listening on every interface listens on the pod's own address here."""
        return value.replace("0.0.0.0", self.ip or "127.0.0.1")

    def _env(self, c: Obj, image_env: dict[str, str], gpu_uuids: str | None) -> dict[str, str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOSTNAME": self.name,
            **self.cluster.apiserver.pod_env(),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **image_env,
        }
        if gpu_uuids:
            env["NVIDIA_VISIBLE_DEVICES"] = gpu_uuids
            env.update(self.cluster.control.pod_env(self.ns, self.name, self.uid))
        for e in c.get("env", []):
            value = e.get("value")
            if "valueFrom" in e:
                value = self._value_from(e["valueFrom"])
            env[e["name"]] = self._rewrite(_expand(value or "", env))
        return env

    def _value_from(self, src: Obj) -> str:
        store = self.cluster.store
        if "fieldRef" in src:
            path = src["fieldRef"]["fieldPath"]
            fields = {"metadata.name": self.name, "metadata.namespace": self.ns, "metadata.uid": self.uid,
                      "spec.nodeName": self.kubelet.name, "spec.serviceAccountName":
                      self.pod["spec"].get("serviceAccountName", ""), "status.podIP": self.ip or "",
                      "status.hostIP": self.kubelet.address}
            m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if m:
                return (self.pod["metadata"].get(m.group(1)) or {}).get(m.group(2), "")
            return fields.get(path, "")
        for kind, key in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            if kind in src:
                ref = src[kind]
                obj = store.find(BY_KIND[key], self.ns, ref["name"])
                data = (obj or {}).get("data") or {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return ""
                    raise ContainerError("CreateContainerConfigError")
                value = data[ref["key"]]
                return base64.b64decode(value).decode() if key == "Secret" else value
        return ""

    def _mounts(self, c: Obj) -> list[dict[str, str]]:
        """Host directories for the container's volume mounts: a PVC's directory lives as
        long as its volume; emptyDir, secrets and config maps only as long as the pod."""
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        mounts = []
        for vm in c.get("volumeMounts", []):
            vol = volumes.get(vm["name"])
            if vol is None:
                continue
            source = self._volume_dir(vol)
            if vm.get("subPath"):
                source = source / vm["subPath"]
                source.mkdir(parents=True, exist_ok=True)
            mounts.append({"source": str(source), "target": vm["mountPath"]})
        return mounts

    def _volume_dir(self, vol: Obj) -> Path:
        store = self.cluster.store
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            pvc = store.find(BY_KIND["PersistentVolumeClaim"], self.ns, claim)
            name = (pvc or {}).get("spec", {}).get("volumeName") or f"{self.ns}-{claim}"
            path = self.cluster.data_dir / "volumes" / name
        else:
            path = self.dir / "scratch" / "volumes" / vol["name"]
            if "projected" in vol:
                projected.write(self.cluster, self.pod, vol["projected"], path)
            for kind, key in (("secret", "secretName"), ("configMap", "name")):
                if kind in vol:
                    obj = store.find(BY_KIND["Secret" if kind == "secret" else "ConfigMap"],
                                     self.ns, vol[kind].get(key, "")) or {}
                    path.mkdir(parents=True, exist_ok=True)
                    for k, v in (obj.get("data") or {}).items():
                        (path / k).write_bytes(base64.b64decode(v) if kind == "secret" else v.encode())
        path.mkdir(parents=True, exist_ok=True)
        return path


class _StubProcess:
    """Stands in for a container process in stub mode: runs until it is signalled."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self._done = asyncio.Event()
        self.pid = -1

    async def wait(self) -> int:
        await self._done.wait()
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self.returncode = 128 + int(sig)
            self._done.set()


def _signal_group(proc: Any, sig: int) -> None:
    if isinstance(proc, _StubProcess):
        proc.send_signal(sig)
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _go_duration(seconds: float) -> str:
    """A duration as the kubelet prints it (Go's Duration truncated to milliseconds)."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    return f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"


def _expand(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` references to earlier variables, as Kubernetes expands them; `$$` escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def _conditions(pod: Obj, initialized: bool, ready: bool) -> list[dict[str, Any]]:
    stamp = rfc3339()
    old = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}

    def cond(type_: str, ok: bool) -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = old.get(type_)
        since = prev["lastTransitionTime"] if prev and prev["status"] == status else stamp
        return {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": since}

    return [cond("PodReadyToStartContainers", True), cond("Initialized", initialized),
            cond("Ready", ready), cond("ContainersReady", ready), cond("PodScheduled", True)]


def _base_status(c: Obj, restarts: int) -> dict[str, Any]:
    return {"name": c["name"], "image": c["image"], "imageID": repo_digest(c["image"]),
            "restartCount": restarts, "lastState": {}}


def _waiting(c: Obj, reason: str) -> dict[str, Any]:
    return {**_base_status(c, 0), "ready": False, "started": False, "state": {"waiting": {"reason": reason}}}


def _set_container(status: Obj, cs: dict[str, Any]) -> None:
    status["containerStatuses"] = [cs if s["name"] == cs["name"] else s for s in status.get("containerStatuses", [])]


def _remove_pod(store: Any, pod: Obj) -> None:
    """The kubelet's final delete: the object goes once its containers have stopped."""
    meta = pod["metadata"]
    current = store.find(POD, meta["namespace"], meta["name"])
    if current is not None and current["metadata"]["uid"] == meta["uid"]:
        try:
            store.remove(POD, meta["namespace"], meta["name"])
        except errors.ApiError:
            pass
