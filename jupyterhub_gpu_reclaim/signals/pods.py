"""The pods signal: single-user pods kept in memory by a kubernetes-asyncio list + watch,
as KubeSpawner's reflector does (label `component=singleuser-server`, the hub namespace,
`timeoutSeconds` on each watch, resumed from the last resourceVersion). A watch that drops
or answers 410 Gone re-lists.

For each pod a `PodInfo`: node, phase, readiness, address, user and server (KubeSpawner's
annotations, else its labels), and what `pod_facts` reads from it, the facts the spawner
reads too: its GPUs (and of which kinds: "1 MIG slice"), whether it waits for one and since
when, its GPU type and whether it is time-sliced, its profile and keep-alive. The
snapshot's pending GPU demand is the GPUs of the pods that wait for one.

`KUBECONFIG` must be set before kubernetes_asyncio is imported, so it is imported inside
the functions that need it, and only the parts this signal uses (`kube_client`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import ipaddress
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from . import pod_facts
from ..oneline import brief
from .http_source import MAX_BODY, SignalError, entry_field, entry_objects, entry_time, read_capped
from .node_gpus import EVERY_S, GpuCounts, GpuKinds, read_gpu_capacity
from .pod_facts import KEEPALIVE_ANNOTATION, SERVER_KEY, USER_KEY, GpuWait

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.pods")
T = TypeVar("T", bound="str | None")


@dataclass(frozen=True, slots=True)
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
    gpu_type: str = ""  # pod_facts.gpu_type: read from the pod, no node lookup
    gpu_shared: bool = False  # pod_facts.gpu_shared: a time-sliced GPU
    gpu_kinds: GpuKinds = ()  # its `gpus` by kind (pod_facts.requested_by_kind), as the pages name them
    profile: str | None = None  # pod_facts.profile; None without one (a plain KubeSpawner's pod)
    gpu_wait: GpuWait | None = None  # pod_facts.gpu_wait: the GPUs it waits for, and since when
    invalid: str | None = None  # why the pod could not be read: only its identity is set (held)

    @property
    def session_id(self) -> str:
        return sys.intern(f"{self.user}/{self.server}")  # as HubServer.session_id

    @property
    def direct_url(self) -> str | None:
        """http://{podIP}:{notebook-port}, the server's own address (for kernel probes)."""
        return f"http://{self.pod_ip}:{self.port}" if self.pod_ip and self.port else None

    @property
    def waits_for_gpu(self) -> bool:
        return self.gpu_wait is not None


def pod_info(pod: Any) -> PodInfo:
    """A PodInfo from a pod in its JSON form (camelCase keys, as the API serves it).

    Raises ValueError only when the pod cannot be told apart: no name, or user/server
    annotations and labels that are not strings. Any other malformed field gives a PodInfo
    with its identity, `invalid` saying what is wrong, and nothing else (its session is
    held, "pod-data-invalid")."""
    meta = entry_field(pod, "metadata", dict, {})
    name = entry_field(meta, "name", str, "", max_length=253)
    if not name:
        raise ValueError(f"a pod without a name: {brief(pod)}")
    labels, annotations = entry_field(meta, "labels", dict, {}), entry_field(meta, "annotations", dict, {})
    identity = dict(namespace=_shared(entry_field(meta, "namespace", str, "", max_length=253)), name=name,
                    user=entry_field(annotations, USER_KEY, str) or entry_field(labels, USER_KEY, str, ""),
                    server=entry_field(annotations, SERVER_KEY, str) or entry_field(labels, SERVER_KEY, str, ""))
    try:
        spec, status = entry_field(pod, "spec", dict, {}), entry_field(pod, "status", dict, {})
        containers = entry_objects(spec, "containers")
        ports = [p for c in containers for p in entry_objects(c, "ports") if entry_field(p, "name", str) == "notebook-port"]
        port = entry_field(ports[0], "containerPort", int) if ports else None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"containerPort: {port}")
        pod_ip = entry_field(status, "podIP", str, max_length=64)
        if pod_ip is not None:
            ipaddress.ip_address(pod_ip)  # probes go to it: an address, nothing else
        phase = _shared(entry_field(status, "phase", str, "", max_length=64) or "Unknown")
        statuses = entry_objects(status, "containerStatuses")
        ready = (phase == "Running" and bool(pod_ip) and not meta.get("deletionTimestamp")
                 and bool(statuses) and all(entry_field(s, "ready", bool, False) for s in statuses))
        requests, gpu_type = pod_facts.gpu_requests(pod), pod_facts.gpu_type(pod)
        return PodInfo(
            **identity, gpus=sum(requests.values()), gpu_shared=pod_facts.gpu_shared(requests, gpu_type),
            # requested_by_kind's own reading, of the requests read once above
            gpu_kinds=_shared_kinds(tuple(pod_facts.by_kind(requests, gpu_type).items())),
            node=_shared(entry_field(spec, "nodeName", str, max_length=253)), phase=phase, ready=ready,
            pod_ip=pod_ip, port=port, created=entry_time(meta, "creationTimestamp"),
            unschedulable=pod_facts.unschedulable(pod), keepalive_until=_keepalive(pod),
            gpu_type=_shared(gpu_type), profile=_shared(pod_facts.profile(pod)), gpu_wait=pod_facts.gpu_wait(pod),
        )
    except ValueError as e:  # ipaddress' errors are ValueErrors too
        return PodInfo(**identity, gpus=0, node=None, phase="Unknown", ready=False, pod_ip=None, port=None,
                       created=None, unschedulable=None, invalid=f"the pod {name}: {e}")


def _shared(text: T) -> T:
    """A value many pods have alike (namespace, node, phase, GPU type, profile) as one string
    for all of them, not a copy each from its JSON (4 MiB at 20,000 pods)."""
    return sys.intern(text) if isinstance(text, str) else text  # type: ignore[return-value]


@functools.lru_cache(maxsize=64)
def _shared_kinds(kinds: GpuKinds) -> GpuKinds:
    """GPUs by kind as one tuple for all the pods that ask for the same (a few values: "1
    GPU", "1 MIG slice"), as `_shared` does for strings: 8 bytes a pod, not a dict each."""
    return kinds


def _keepalive(pod: Any) -> dt.datetime | None:
    """The spawn form's keep-alive (the user typed it): a malformed one is ignored."""
    try:
        return pod_facts.keepalive_until(pod)
    except ValueError as e:
        log.warning("ignoring a malformed %s annotation: %s", KEEPALIVE_ANNOTATION, e)
        return None


def kubernetes_configuration(kubeconfig: str = "") -> str | None:
    """Where PodSignal takes its Kubernetes configuration from, as it looks for one
    (`_connect`), or None where there is none: a hub without Kubernetes."""
    if kubeconfig:
        return f"--kubeconfig={kubeconfig}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "the pod's service account"
    if os.environ.get("KUBECONFIG"):  # kubernetes_asyncio's default location, then its fallback
        return f"KUBECONFIG={os.environ['KUBECONFIG']}"
    if os.path.exists(os.path.expanduser("~/.kube/config")):
        return "~/.kube/config"
    return None


@dataclass(frozen=True)
class PodSnapshot:
    """The single-user pods at one moment: by session id, and the GPUs waited for."""

    by_session: dict[str, PodInfo]
    pending_gpus: int
    gpu_capacity: GpuCounts | None = None  # the cluster's GPUs by kind (node_gpus; None: not known)


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
        self.gpu_capacity: GpuCounts | None = None  # the cluster's GPUs by kind (node_gpus), read every EVERY_S
        self._capacity_at = -EVERY_S
        self._capacity_failing = ""

    async def _connect(self) -> None:
        from .kube_client import load  # after KUBECONFIG is set
        kube = load()
        config = kube.config
        if self.kubeconfig:
            await config.load_kube_config(config_file=self.kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                await config.load_kube_config()
        self._api_client = kube.ApiClient()
        self._api = kube.CoreV1Api(self._api_client)

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
                    if not 200 <= resp.status <= 299:
                        snippet = (await resp.content.read(200)).decode("utf-8", "replace")
                        raise SignalError("pods", f"listing pods in {self.namespace}: HTTP {resp.status}: "
                                                  f"{snippet!r}", resp.status)
                    text = await read_capped(resp.content, resp.content_length, MAX_BODY["pods"])
                finally:
                    resp.release()
                if text is None:
                    raise SignalError("pods", f"listing pods in {self.namespace}: a page larger than "
                                              f"{MAX_BODY['pods']} bytes")
                body = json.loads(text)
                del text
                items = entry_field(body, "items", list, [])
                meta = entry_field(body, "metadata", dict, {})
                resource_version = entry_field(meta, "resourceVersion", str) or resource_version
                token = entry_field(meta, "continue", str)
            except SignalError:
                raise
            except Exception as e:  # ApiException, aiohttp errors, timeouts, a body that is not a pod list
                raise SignalError("pods", f"listing pods in {self.namespace}: {type(e).__name__}: "
                                          f"{str(e)[:200]}") from None
            for pod in items:
                _put(pods, pod)
            del body, items
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
        await self._read_capacity()
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

    def snapshot(self, max_age: float) -> PodSnapshot:
        """The current view; SignalError when it was never read, or when the watch has
        been down for more than `max_age` seconds (the view may be out of date)."""
        pods = self.pods_now()
        if self.failing and (self.last_ok is None or time.monotonic() - self.last_ok > max_age):
            raise SignalError("pods", f"the pod watch has been down for over {max_age:g} s: {self.failing}")
        return PodSnapshot(by_session={p.session_id: p for p in pods.values() if p.user},
                           pending_gpus=sum(p.gpu_wait.gpus for p in pods.values() if p.gpu_wait),
                           gpu_capacity=self.gpu_capacity)

    async def _read_capacity(self) -> None:
        """The cluster's GPUs again, at most every EVERY_S; why not, logged once a failure."""
        if time.monotonic() - self._capacity_at < EVERY_S:
            return
        self._capacity_at = time.monotonic()
        self.gpu_capacity, why = await read_gpu_capacity(self._api, self.request_timeout)
        if why and why != self._capacity_failing:
            log.info("the cluster's GPUs are not known (the admin page says what is held): "
                     "listing nodes: %s", why)
        self._capacity_failing = why

    async def _run(self) -> None:
        from .kube_client import load
        kube = load()
        backoff = 0.5
        while True:
            try:
                w = kube.Watch(return_type="object")  # the pods as served, checked by pod_info
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
                await self._read_capacity()
            except asyncio.CancelledError:
                raise
            except kube.ApiException as e:
                self.failing = f"watch: HTTP {e.status} {e.reason}"
                if e.status == 410:
                    log.info("pod watch expired (410 Gone): re-listing")
                else:
                    log.warning("pod watch failed: %s %s: re-listing", e.status, e.reason)
                await self._relist(backoff)
                backoff = min(backoff * 2, 30)
            except Exception as e:  # a broken connection, or an event that is not one (LineTooLong
                # over kubernetes-asyncio's 4 MiB per line, too deep, no event): the view is re-listed
                self.failing = f"watch dropped: {type(e).__name__}: {str(e)[:200]}"
                log.warning("pod watch dropped (%s): re-listing", self.failing[len("watch dropped: "):])
                await self._relist(backoff)
                backoff = min(backoff * 2, 30)

    async def _relist(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self.list_once()
        except SignalError as e:
            log.warning("%s", e)

    def _apply(self, event: Any) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        pod = event.get("object") if isinstance(event, dict) else None
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(rv, str) and rv:
            self._resource_version = rv
        if kind == "DELETED":
            name = meta.get("name") if isinstance(meta, dict) else None
            if isinstance(name, str):
                self.pods.pop(name, None)
        elif kind in ("ADDED", "MODIFIED") and not _put(self.pods, pod):
            # which pod changed, and how? The list tells (and leaves that one out).
            raise ValueError("a pod in the watch cannot be told apart")


def _put(view: dict[str, PodInfo], pod: Any) -> bool:
    """Add or replace one pod of a list or watch in `view`. A pod that cannot be told
    apart is logged and left out (False); a malformed one is kept, marked invalid (held)."""
    try:
        info = pod_info(pod)
    except ValueError as e:
        log.warning("ignoring a pod that cannot be told apart: %s", e)
        return False
    if info.invalid:
        log.warning("%s", info.invalid)
    view[info.name] = info
    return True
