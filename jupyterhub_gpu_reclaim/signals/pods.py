"""The pods signal: single-user pods kept in memory by a kubernetes-asyncio list + watch,
as KubeSpawner's reflector does (label `component=singleuser-server`, the hub namespace,
`timeoutSeconds` on each watch, resumed from the last resourceVersion). A watch that drops
or answers 410 Gone re-lists.

For each pod: GPUs (container limits `nvidia.com/gpu`), node, phase, readiness, address,
user and server (KubeSpawner's annotations, else its labels); and the pending GPU demand:
GPUs of pods the scheduler cannot place for lack of `nvidia.com/gpu`.

`KUBECONFIG` must be set before kubernetes_asyncio is imported, so it is imported inside
the functions that need it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from .base import SignalError, parse_time

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.pods")

GPU_RESOURCE = "nvidia.com/gpu"
USER_KEY = "hub.jupyter.org/username"
SERVER_KEY = "hub.jupyter.org/servername"
# "keep alive until" from the spawn form (GPUReclaimSpawner writes it; ISO 8601 UTC)
KEEPALIVE_ANNOTATION = "jupyterhub-gpu-reclaim/keepalive-until"


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    user: str
    server: str
    gpus: int
    node: str | None
    phase: str
    ready: bool  # as KubeSpawner's is_pod_running: Running, an IP, not deleting, all ready
    pod_ip: str | None
    port: int | None  # the container port named notebook-port
    created: dt.datetime | None
    unschedulable: str | None  # the scheduler's message while PodScheduled is False
    keepalive_until: dt.datetime | None = None  # declared on the spawn form

    @property
    def session_id(self) -> str:
        return f"{self.user}/{self.server}"

    @property
    def direct_url(self) -> str | None:
        """http://{podIP}:{notebook-port}, the server's own address (for kernel probes)."""
        return f"http://{self.pod_ip}:{self.port}" if self.pod_ip and self.port else None

    @property
    def waits_for_gpu(self) -> bool:
        return bool(self.unschedulable) and GPU_RESOURCE in (self.unschedulable or "") and self.gpus > 0


def _gpus(resources: dict[str, Any] | None) -> int:
    resources = resources or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE, (resources.get("requests") or {}).get(GPU_RESOURCE, 0))
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_info(pod: dict[str, Any]) -> PodInfo:
    """A PodInfo from a pod in its JSON form (camelCase keys, as the API serves it)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    containers = spec.get("containers") or []
    port = next((p.get("containerPort") for c in containers for p in c.get("ports") or []
                 if p.get("name") == "notebook-port"), None)
    statuses = status.get("containerStatuses") or []
    phase = status.get("phase") or "Unknown"
    ready = (phase == "Running" and bool(status.get("podIP")) and not meta.get("deletionTimestamp")
             and bool(statuses) and all(s.get("ready") for s in statuses))
    unschedulable = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            unschedulable = cond.get("message") or cond.get("reason") or "Unschedulable"
    return PodInfo(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""),
        user=annotations.get(USER_KEY) or labels.get(USER_KEY, ""),
        server=annotations.get(SERVER_KEY) or labels.get(SERVER_KEY, ""),
        gpus=sum(_gpus(c.get("resources")) for c in containers),
        node=spec.get("nodeName"), phase=phase, ready=ready,
        pod_ip=status.get("podIP"), port=port,
        created=parse_time(meta.get("creationTimestamp")) if isinstance(meta.get("creationTimestamp"), str) else None,
        unschedulable=unschedulable,
        keepalive_until=_time_or_none(annotations.get(KEEPALIVE_ANNOTATION)),
    )


def _time_or_none(value: Any) -> dt.datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        log.warning("ignoring a malformed %s annotation: %r", KEEPALIVE_ANNOTATION, value[:100])
        return None


@dataclass(frozen=True)
class PodSnapshot:
    """The single-user pods at one moment: by session id, and the GPUs waited for."""

    by_session: dict[str, PodInfo]
    pending_gpus: int


class PodSignal:
    """`await start()` lists and then watches in the background; `pods` is the current
    view; `stop()` ends the watch. Before the first list succeeds, `pods_now()` raises."""

    def __init__(self, namespace: str, kubeconfig: str | None = None,
                 label_selector: str = "component=singleuser-server",
                 watch_timeout: int = 10, request_timeout: float = 30.0,
                 list_page_size: int = 500) -> None:
        self.namespace = namespace
        self.list_page_size = list_page_size  # pods per list request (0: all at once)
        self.kubeconfig = kubeconfig
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.pods: dict[str, PodInfo] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        self._api_client: Any = None
        self._api: Any = None
        self._task: asyncio.Task | None = None
        self._resource_version: str | None = None
        self.last_ok: float | None = None  # time.monotonic() when the view was last known current
        self.failing: str | None = None  # why the watch is down, while it is

    async def _connect(self) -> None:
        from kubernetes_asyncio import client, config  # after KUBECONFIG is set
        if self.kubeconfig:
            await config.load_kube_config(config_file=self.kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                await config.load_kube_config()
        self._api_client = client.ApiClient()
        self._api = client.CoreV1Api(self._api_client)

    def _to_dict(self, pod: Any) -> dict[str, Any]:
        return pod if isinstance(pod, dict) else self._api_client.sanitize_for_serialization(pod)

    async def list_once(self) -> dict[str, PodInfo]:
        """List the pods now, replacing the view; SignalError("pods", ...) on failure."""
        if self._api is None:
            try:
                await self._connect()
            except Exception as e:  # no or a bad kubeconfig, not in a cluster: a pods failure too
                raise SignalError("pods", f"cannot connect to the Kubernetes API: {type(e).__name__}: {e}") from None
        # The JSON as served, not V1Pod models (with 5,000 pods the models took ~8 s and
        # ~200 MiB to build, only to be turned back into dicts for pod_info), in pages of
        # `list_page_size` (`limit`/`continue`, one consistent snapshot) so that only one
        # page of JSON is in memory at a time.
        pods: dict[str, PodInfo] = {}
        resource_version: str | None = None
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"label_selector": self.label_selector,
                                      "_request_timeout": self.request_timeout, "_preload_content": False}
            if self.list_page_size:
                kwargs["limit"] = self.list_page_size
            if token:
                kwargs["_continue"] = token
            try:
                resp = await self._api.list_namespaced_pod(self.namespace, **kwargs)
                try:
                    text = await resp.read()
                    if not 200 <= resp.status <= 299:
                        raise SignalError("pods", f"listing pods in {self.namespace}: HTTP {resp.status}: "
                                                  f"{text[:200].decode('utf-8', 'replace')!r}", resp.status)
                finally:
                    resp.release()
                body = json.loads(text)
                del text
                items, meta = body.get("items") or [], body.get("metadata") or {}
            except SignalError:
                raise
            except Exception as e:  # ApiException, aiohttp errors, timeouts, a body that is not a pod list
                raise SignalError("pods", f"listing pods in {self.namespace}: {type(e).__name__}: {e}") from None
            for pod in items:
                info = pod_info(pod)
                pods[info.name] = info
            del body, items
            resource_version = meta.get("resourceVersion") or resource_version
            token = meta.get("continue")
            if not token:
                break
        self.pods = pods
        self._resource_version = resource_version
        self.relists += 1
        self.last_ok, self.failing = time.monotonic(), None
        self.synced.set()
        return pods

    async def start(self) -> None:
        """List, then watch in the background. Raises SignalError when the list fails;
        calling it again once started does nothing."""
        if self._task is not None:
            return
        await self.list_once()
        self._task = asyncio.create_task(self._run(), name="pods-watch")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._api_client is not None:
            await self._api_client.close()
            self._api_client = self._api = None

    def pods_now(self) -> dict[str, PodInfo]:
        if not self.synced.is_set():
            raise SignalError("pods", "the pod list has not been read yet")
        return dict(self.pods)

    def by_session(self) -> dict[str, PodInfo]:
        return {p.session_id: p for p in self.pods_now().values() if p.user}

    def pending_gpu_demand(self) -> int:
        """GPUs requested by pods the scheduler cannot place for lack of nvidia.com/gpu."""
        return sum(p.gpus for p in self.pods_now().values() if p.waits_for_gpu)

    def snapshot(self, max_age: float) -> PodSnapshot:
        """The current view; SignalError when it was never read, or when the watch has
        been down for more than `max_age` seconds (the view may be out of date)."""
        pods = self.pods_now()
        if self.failing and (self.last_ok is None or time.monotonic() - self.last_ok > max_age):
            raise SignalError("pods", f"the pod watch has been down for over {max_age:g} s: {self.failing}")
        return PodSnapshot(by_session={p.session_id: p for p in pods.values() if p.user},
                           pending_gpus=sum(p.gpus for p in pods.values() if p.waits_for_gpu))

    async def _run(self) -> None:
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException
        backoff = 0.5
        while True:
            try:
                w = watch.Watch()
                async with w.stream(self._api.list_namespaced_pod, self.namespace,
                                    label_selector=self.label_selector,
                                    resource_version=self._resource_version,
                                    timeout_seconds=self.watch_timeout,
                                    _request_timeout=self.watch_timeout + 5) as stream:
                    async for event in stream:
                        self._apply(event)
                        self.last_ok, self.failing = time.monotonic(), None
                # the server ended this watch (timeoutSeconds): resume where we were
                self.last_ok, self.failing = time.monotonic(), None
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                self.failing = f"watch: HTTP {e.status} {e.reason}"
                if e.status == 410:
                    log.info("pod watch expired (410 Gone): re-listing")
                else:
                    log.warning("pod watch failed: %s %s: re-listing", e.status, e.reason)
                await self._relist(backoff)
                backoff = min(backoff * 2, 30)
            except Exception as e:
                self.failing = f"watch dropped: {type(e).__name__}: {e}"
                log.warning("pod watch dropped (%s: %s): re-listing", type(e).__name__, e)
                await self._relist(backoff)
                backoff = min(backoff * 2, 30)

    async def _relist(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self.list_once()
        except SignalError as e:
            log.warning("%s", e)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        pod = self._to_dict(event.get("object"))
        rv = (pod.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._resource_version = rv
        if kind == "BOOKMARK":
            return
        info = pod_info(pod)
        if kind == "DELETED":
            self.pods.pop(info.name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.pods[info.name] = info
