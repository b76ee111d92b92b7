"""One pod on a simulated kubelet's node, from binding to removal (`PodWorker`): its
claims, volumes, /etc/hosts and Service variables, its containers started through the
container runtime (with what `containerconfig` gives each), probed for readiness
(`probes`) and restarted with back-off, its status and events in the kubelet's words, and
SIGTERM then SIGKILL before the pod object goes. What it reads and writes of the cluster goes
through its kubelet's `api` (sim.kubelet.podapi: the real API server, with the node's credentials); `dispatch` hands a kubelet's pod changes to their workers."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from . import cgroups, containerconfig, hosts, probes, runtime, volumes
from .backoff import RestartBackoff
from .containerconfig import ContainerError
from .images import repo_digest
from .podapi import PodApi
from ..objects import Obj
from ..api.timestamps import go_duration, rfc3339

log = logging.getLogger("gpu_reclaim_sim.kubelet.kubelet")

MIN_GRACE = 2.0  # the kubelet gives SIGTERM at least this long (minimumGracePeriodInSeconds)
MOUNT_RETRY_MAX = 122.0  # the volume manager's longest back-off (2m2s)
CLAIM_POLL = 0.1  # seconds between looks while a pod's claim is not yet bound
CLAIM_TIMEOUT = 10.0  # then a FailedMount event says what the pod waits for (a real kubelet: 2m3s)
CONFIG_RETRY_S = 2.0  # between tries of a container whose config cannot be made (the kubelet's pod syncs)


class Kubelet(Protocol):
    """What a pod's worker needs of its node's kubelet (sim.nodeagent.nodepods.NodePods,
    which imports this module: a protocol, so the two do not import each other)."""

    cluster: Any
    name: str
    address: str
    version: str  # the kubelet's, as its Node reports it
    workers: dict[str, PodWorker]

    @property
    def api(self) -> PodApi: ...

    async def pull(self, worker: PodWorker, container: Obj) -> None: ...


class PodWorker:
    """Runs one pod on a node from binding to removal."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.cluster = kubelet.cluster
        self.api = kubelet.api
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.task: asyncio.Task | None = None
        self.procs: dict[str, runtime.ContainerProcess | runtime.StubProcess] = {}
        self.ip: str | None = None
        self.dir = self.cluster.data_dir / "pods" / self.ns / f"{self.name}-{self.uid[:8]}"
        self.volumes = volumes.PodVolumes(pod, self.dir, self.lookup, self._claim_dir, self._token)
        self.volume_paths: dict[str, Path] = {}
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._life: asyncio.Task | None = None
        self._released = False
        self._restarts: dict[str, int] = {}
        self._container_ids: dict[str, str] = {}
        self._started_at: dict[str, str] = {}
        self._state: dict[str, Obj] = {}  # container name -> its current state
        self._last_terminated: dict[str, Obj] = {}  # container name -> its last run's end
        self._ready: dict[str, bool] = {}  # container name -> its readiness probe's verdict
        self._probers: dict[str, asyncio.Task] = {}  # container name -> its readiness prober
        self._backoff = RestartBackoff()

    # --- status and events -----------------------------------------------------------

    def event(self, reason: str, message: str, container: Obj | None = None, type_: str = "Normal") -> None:
        field_path = f"spec.containers{{{container['name']}}}" if container else None
        self.api.event(self.pod, reason, message, type_=type_, host=self.kubelet.name, field_path=field_path)

    def update_status(self, mutate) -> None:
        pod = self.api.write_status(self.pod, mutate)
        if pod is not None:
            self.pod = pod

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
        try:
            for c in self._containers():
                proc = self.procs.get(c["name"])
                if proc is not None and proc.returncode is None:
                    self.event("Killing", f"Stopping container {c['name']}", c)
            await self.shutdown(self._grace)
        finally:  # whatever happened, the pod goes once its processes have
            try:
                await self.api.remove(self.pod)
            finally:  # changes seen meanwhile came to this worker, not to a new one
                self.kubelet.workers.pop(self.uid, None)

    async def abandon(self, grace: float) -> None:
        """Its kubelet stops: the containers stop (not restarted), the pod object stays."""
        for task in (self._life, self.task):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._life, self.task) if t is not None), return_exceptions=True)
        await self.shutdown(grace)

    async def shutdown(self, grace: float) -> None:
        """SIGTERM to every container, SIGKILL to all their processes after `grace`
        seconds (at least the kubelet's minimum of 2 s)."""
        procs = [p for p in self.procs.values() if p.returncode is None]
        for p in procs:
            p.terminate()
        if procs:
            try:
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), max(grace, MIN_GRACE))
            except asyncio.TimeoutError:
                for p in procs:
                    p.kill()
                await asyncio.gather(*(p.wait() for p in procs))
        await self.release()

    async def release(self) -> None:
        """Give back the pod's GPUs, address, cgroups and scratch space (its PVCs stay)."""
        if self._released:
            return
        self._released = True
        for name in list(self._probers):
            self._stop_probe(name)
        self.cluster.gpus.release(self.ns, self.name)
        self.cluster.hosts.unregister(self.uid)
        await self.cluster.dataplane.remove_pod(self.uid)  # CNI DEL
        self.cluster.network.pods.release(self.ip)
        if self._runs_processes():
            if runtime.sandbox_available() and cgroups.available():
                await asyncio.to_thread(cgroups.remove, self.uid)
            self.volumes.release()
            await asyncio.to_thread(shutil.rmtree, self.dir, True)

    def _containers(self) -> list[Obj]:
        return self.pod["spec"].get("containers", [])

    def _runs_processes(self) -> bool:
        """Whether any container of the pod is a process (not stub mode or a stub image)."""
        if self.cluster.scenario.mode == "stub":
            return False
        spec = self.pod["spec"]
        return any(not self.cluster.images.get(c["image"]).stub
                   for c in spec.get("initContainers", []) + spec.get("containers", []))

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
        gpu_env: dict[str, str] = {}
        # the node's device plugin serves one resource: whole GPUs, MIG instances or replicas
        resource = self.cluster.gpus.resources.get(self.kubelet.name, "nvidia.com/gpu")
        for c in self._containers():
            count = int(str((c.get("resources", {}).get("limits") or {}).get(resource, 0)) or 0)
            if not count:
                continue
            try:
                gpus = self.cluster.gpus.allocate(self.kubelet.name, self.ns, self.name, c["name"], count,
                                                  uid=self.uid)
            except RuntimeError:  # the device plugin's admission failure, in the kubelet's words
                message = (f"Allocate failed due to requested number of devices unavailable for {resource}. "
                           f"Requested: {count}, Available: {len(self.cluster.gpus.free(self.kubelet.name))}, which is unexpected")
                self.event("UnexpectedAdmissionError", message, type_="Warning")
                self.update_status(lambda s, message=message: s.update({
                    "phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}))
                await self.release()
                return
            gpu_env[c["name"]] = ",".join(dict.fromkeys(g.uuid for g in gpus))  # two replicas: one GPU
        start = rfc3339()
        self.update_status(lambda s: s.update({
            "hostIP": self.kubelet.address, "hostIPs": [{"ip": self.kubelet.address}],
            "startTime": start, "qosClass": s.get("qosClass", "BestEffort"),
            "conditions": _conditions(self.pod, initialized=not spec.get("initContainers"), ready=False),
            "containerStatuses": [_waiting(c, "ContainerCreating") for c in self._containers()],
        }))
        await self._wait_for_claims()
        if self._runs_processes():  # stub containers see no files: none to write
            await self._mount_volumes()
        self.ip = self.cluster.network.pods.allocate()
        if self._runs_processes():
            await self.cluster.dataplane.add_pod(self.pod, self.ip)  # CNI ADD: in the rules before it runs
            self.dir.mkdir(parents=True, exist_ok=True)
            self.cluster.hosts.register(self.pod, self.ip, self.dir / "names" / "hosts")  # kept current (sim.kubelet.names)
            (self.dir / "etc-hostname").write_text(hosts.pod_hostname(self.pod)[0] + "\n")
        try:
            for c in spec.get("initContainers", []):
                await self.kubelet.pull(self, c)
                code = await (await self._start(c, gpu_env.get(c["name"]))).wait()
                self.procs.pop(c["name"], None)
                if code != 0:
                    raise ContainerError(f"Init:Error (exit code {code})")
            for c in self._containers():
                await self.kubelet.pull(self, c)
            first = {c["name"]: await self._start_configured(c, gpu_env.get(c["name"])) for c in self._containers()}
        except (ContainerError, runtime.StartError) as e:
            reason = str(e).split(" ")[0] if isinstance(e, ContainerError) else "StartError"
            self.update_status(lambda s: s.update({
                "containerStatuses": [_waiting(c, reason) for c in self._containers()]}))
            return
        self.update_status(lambda s: s.update({
            "phase": "Running", "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "conditions": _conditions(self.pod, initialized=True, ready=self._all_ready()),
            "containerStatuses": [self._status(c) for c in self._containers()],
        }))
        codes = await asyncio.gather(*(self._keep_running(c, first[c["name"]], gpu_env.get(c["name"]))
                                       for c in self._containers()))
        # every container has finished for good
        phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        self.update_status(lambda s: s.update({
            "phase": phase, "conditions": _conditions(self.pod, initialized=True, ready=False)}))
        await self.release()

    async def _wait_for_claims(self) -> None:
        """The volume manager's wait for a pod's claims: every claim it mounts must be
        bound; what the pod refers to is fetched meanwhile (`PodApi.prepare`). An unbound one is
        looked at again every `CLAIM_POLL` seconds, with one FailedMount warning after
        `CLAIM_TIMEOUT`, as the kubelet reports a mount that timed out."""
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in self.pod["spec"].get("volumes", [])
                  if (v.get("persistentVolumeClaim") or {}).get("claimName")}
        deadline, warned = time.monotonic() + CLAIM_TIMEOUT, False
        while True:
            await self.api.prepare(self.pod)  # what it refers to, its claims among them, as they are now
            unbound = [name for name, claim in claims.items() if self.api.claim_dir(self.ns, claim) is None]
            if not unbound:
                return
            if not warned and time.monotonic() >= deadline:
                warned = True
                every = " ".join(v["name"] for v in self.pod["spec"].get("volumes", []))
                self.event("FailedMount", f"Unable to attach or mount volumes: unmounted volumes=[{' '.join(unbound)}], "
                           f"unattached volumes=[{every}]: timed out waiting for the condition", type_="Warning")
            await asyncio.sleep(CLAIM_POLL)

    async def _mount_volumes(self) -> None:
        """Set up every volume of the pod; one that fails is a FailedMount event, tried
        again with the volume manager's back-off (0.5 s doubling to about 2 min)."""
        delay = 0.5
        while True:
            failed = []
            for vol in self.pod["spec"].get("volumes", []):
                if vol["name"] in self.volume_paths:
                    continue
                try:
                    self.volume_paths[vol["name"]] = self.volumes.setup(vol)
                except volumes.MountError as e:
                    failed.append(vol["name"])
                    self.event("FailedMount", f'MountVolume.SetUp failed for volume "{vol["name"]}" : {e}',
                               type_="Warning")
            if not failed:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MOUNT_RETRY_MAX)
            await self.api.prepare(self.pod)  # a Secret or ConfigMap made since

    def _all_ready(self) -> bool:
        return all(self._is_ready(c["name"]) for c in self._containers())

    def _is_ready(self, name: str) -> bool:
        """Running, and, with a readiness probe, passing it."""
        return "running" in self._state.get(name, {}) and self._ready.get(name, True)

    def _probe(self, c: Obj, proc: Any) -> None:
        """Probe a started container's readiness, if it has a readinessProbe (a stub has
        nothing to probe: ready once it "runs")."""
        spec = c.get("readinessProbe")
        if not spec or isinstance(proc, runtime.StubProcess):
            return
        probe, name = probes.Probe.of(spec), c["name"]
        self._ready[name] = False

        async def once() -> str | None:
            return await probes.check(probe, c, proc, self.ip or "", self.kubelet.address, self.kubelet.version)

        def report(ready: bool) -> None:
            self._ready[name] = ready
            self._set_state(c, self._state[name])

        def failed(message: str) -> None:
            self.event("Unhealthy", f"Readiness probe failed: {message}", c, "Warning")

        self._probers[name] = asyncio.create_task(probes.watch(probe, once, report, failed))

    def _stop_probe(self, name: str) -> None:
        task = self._probers.pop(name, None)
        if task is not None:
            task.cancel()
        self._ready.pop(name, None)

    async def _keep_running(self, c: Obj, proc: Any, gpu_uuids: str | None) -> int:
        """Wait for a container to exit and apply the restart policy, with the kubelet's
        back-off (CrashLoopBackOff). Returns its exit code once it is done for good."""
        policy = self.pod["spec"].get("restartPolicy", "Always")
        name = c["name"]
        while True:
            code = 128 if proc is None else await proc.wait()
            finished = time.time()
            self._stop_probe(name)
            # no process: it failed to start, and its state says how it terminated
            terminated = self._state[name]["terminated"] if proc is None else {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": self._started_at.get(name), "finishedAt": rfc3339(),
                "containerID": self._container_ids.get(name)}
            self.procs.pop(name, None)
            if not (policy == "Always" or (policy == "OnFailure" and code != 0)):
                self._set_state(c, {"terminated": terminated})
                return code
            wait = self._backoff.wait(name, finished, time.time())
            if wait > 0:
                message = (f"back-off {go_duration(self._backoff.delay(name))} restarting failed "
                           f"container={name} pod={self.name}_{self.ns}({self.uid})")
                self._set_state(c, {"waiting": {"reason": "CrashLoopBackOff", "message": message}}, terminated)
                self.event("BackOff", f"Back-off restarting failed container {name} in pod "
                           f"{self.name}_{self.ns}({self.uid})", c, "Warning")
                await asyncio.sleep(wait)
            self._backoff.restarted(name, finished, time.time())
            self._restarts[name] = self._restarts.get(name, 0) + 1
            self._rotate_log(name)
            try:
                await self.api.prepare(self.pod)  # what its environment refers to, as it is now
                proc = await self._start_or_fail(c, gpu_uuids, terminated)
            except ContainerError as e:  # e.g. a secret its environment needs is gone
                self._set_state(c, {"terminated": {**terminated, "exitCode": 128, "reason": "StartError",
                                                   "message": str(e), "finishedAt": rfc3339()}})
                proc = None
            if proc is not None:
                self._set_state(c, self._state[name])

    def _set_state(self, c: Obj, state: Obj, last: Obj | None = None) -> None:
        self._state[c["name"]] = state
        if last is not None:
            self._last_terminated[c["name"]] = last

        def apply(s: Obj) -> None:
            _set_container(s, self._status(c))
            s["conditions"] = _conditions(self.pod, initialized=True, ready=self._all_ready())

        self.update_status(apply)

    def _status(self, c: Obj) -> dict[str, Any]:
        state = self._state.get(c["name"], {"waiting": {"reason": "ContainerCreating"}})
        running = "running" in state
        last = self._last_terminated.get(c["name"])
        return {**_base_status(c, self._restarts.get(c["name"], 0)), "ready": self._is_ready(c["name"]),
                "started": running,
                "containerID": self._container_ids.get(c["name"]), "state": state,
                "lastState": {"terminated": last} if last else {}}

    def _rotate_log(self, container: str) -> None:
        """Keep the last run's output for `kubectl logs --previous`."""
        current = self.cluster.pod_log_path(self.ns, self.name, container)
        if current.exists():
            current.replace(self.cluster.pod_log_path(self.ns, self.name, container, previous=True))

    # --- processes -------------------------------------------------------------------

    async def _start_configured(self, c: Obj, gpu_uuids: str | None) -> Any:
        """`_start_or_fail`, tried again while what the container's environment refers to is
        missing (a Secret, a key: CreateContainerConfigError), as the kubelet's pod syncs try
        it again until it is there; the container waits with that reason meanwhile."""
        while True:
            try:
                return await self._start_or_fail(c, gpu_uuids)
            except ContainerError as e:
                if str(e) != containerconfig.CONFIG_ERROR:
                    raise
            self.update_status(lambda s: _set_container(s, _waiting(c, containerconfig.CONFIG_ERROR)))
            await asyncio.sleep(CONFIG_RETRY_S)
            await self.api.prepare(self.pod)  # what it refers to, as it is now

    async def _start_or_fail(self, c: Obj, gpu_uuids: str | None, last: Obj | None = None) -> Any:
        """Start a container; one that cannot start is terminated with StartError (exit
        code 128), the runtime's message in a `Failed` event, and restarted by policy."""
        if last is not None:
            self._last_terminated[c["name"]] = last
        try:
            proc = await self._start(c, gpu_uuids)
        except runtime.StartError as e:
            message = ("failed to create containerd task: failed to create shim task: OCI runtime create "
                       f"failed: runc create failed: unable to start container process: {e}: unknown")
            self.event("Failed", f"Error: {message}", c, "Warning")
            now = rfc3339()
            self._set_state(c, {"terminated": {"exitCode": 128, "reason": "StartError", "message": message,
                                               "startedAt": "1970-01-01T00:00:00Z", "finishedAt": now,
                                               "containerID": self._container_ids.get(c["name"])}})
            return None
        self._state[c["name"]] = {"running": {"startedAt": self._started_at[c["name"]]}}  # the caller reports it
        self._probe(c, proc)
        return proc

    async def _start(self, c: Obj, gpu_uuids: str | None) -> Any:
        self.event("Created", f"Created container {c['name']}", c)
        cid = uuid.uuid4().hex
        self._container_ids[c["name"]] = f"containerd://{cid}"
        image = self.cluster.images.get(c["image"])
        if self.cluster.scenario.mode == "stub" or image.stub:
            proc: Any = runtime.StubProcess()
        else:
            proc = await containerconfig.start(self, c, image, gpu_uuids, cid)
        self._started_at[c["name"]] = rfc3339()
        self.procs[c["name"]] = proc
        self.event("Started", f"Started container {c['name']}", c)
        return proc

    # --- what the volumes read -------------------------------------------------------

    def lookup(self, kind: str, name: str) -> Obj | None:
        return self.api.lookup(self.ns, kind, name)

    def _claim_dir(self, claim: str) -> Path | None:
        return self.api.claim_dir(self.ns, claim)

    def _token(self, service_account: str, expiration: int, audience: str | None) -> str:
        return self.api.token(self.pod, service_account, expiration, audience)


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


def dispatch(kubelet: Kubelet, type_: str, pod: Obj) -> None:
    """A change to a pod bound to `kubelet`'s node: a new pod gets a worker (one that has
    already finished, and is not being deleted, none), a deleted one stops its worker with its
    grace period (at once when the object is gone). One bad pod must not stop the node."""
    try:
        uid = pod["metadata"]["uid"]
        worker = kubelet.workers.get(uid)
        if type_ == "DELETED":
            if worker:
                worker.request_stop(grace=0)
            return
        if worker is None:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
                return
            worker = kubelet.workers[uid] = PodWorker(kubelet, pod)
            worker.task = asyncio.create_task(worker.run())
        if pod["metadata"].get("deletionTimestamp"):
            worker.request_stop(grace=pod["metadata"].get("deletionGracePeriodSeconds", 30))
    except Exception:
        log.exception("node %s: handling pod %s", kubelet.name, pod["metadata"].get("name"))
