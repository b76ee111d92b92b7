"""What a pod's worker reads and writes of the cluster (sim.kubelet.podapi.PodApi), through the
real API server as the node itself (`system:node:<name>`): the Node authorizer lets it read
only what pods bound to it refer to, and NodeRestriction lets it write only those pods' status.

- `prepare` fetches what a pod refers to: its Secrets and ConfigMaps, its claims and their
  volumes, a token for each projected service account token (TokenRequest, bound to the pod),
  the Services of its namespace and `kubernetes` (for their variables) and the Node. One
  that is not there (or that the node may not read) reads as absent, as the kubelet reports
  it (FailedMount, CreateContainerConfigError).
- Status and Events are written in the background, each pod's status in order and only its
  latest (the kubelet's status manager), as a merge patch that names the pod's UID (so it
  never lands on a new pod of the same name); `remove` waits for the writes before it, then
  deletes the pod with grace period 0 and the UID as precondition (the kubelet's final
  delete).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..events import event_body
from ..kubelet.names import API_SERVICE
from ..objects import Obj

log = logging.getLogger("gpu_reclaim_sim.nodeagent.apipodapi")

RETRY_S = 1.0  # between tries of a write the API server did not answer
MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}  # the client's typing lacks it


def references(pod: Obj) -> set[tuple[str, str]]:
    """The (kind, name) of every Secret and ConfigMap a pod refers to, as the kubelet's
    managers collect them (volumes, projected sources, env valueFrom)."""
    spec = pod.get("spec") or {}
    refs: set[tuple[str, str]] = set()
    for vol in spec.get("volumes") or []:
        sources = [vol] + ((vol.get("projected") or {}).get("sources") or [])
        for src in sources:
            if src.get("secret"):
                refs.add(("Secret", src["secret"].get("secretName") or src["secret"].get("name") or ""))
            if src.get("configMap"):
                refs.add(("ConfigMap", src["configMap"].get("name") or ""))
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for e in c.get("env") or []:
            value_from = e.get("valueFrom") or {}
            if value_from.get("secretKeyRef"):
                refs.add(("Secret", value_from["secretKeyRef"]["name"]))
            if value_from.get("configMapKeyRef"):
                refs.add(("ConfigMap", value_from["configMapKeyRef"]["name"]))
    return {(kind, name) for kind, name in refs if name}


class ApiPodApi:
    def __init__(self, api: k8s.ApiClient, node: str) -> None:
        self.client, self.core = api, k8s.CoreV1Api(api)
        self.node_name = node
        self._objects: dict[tuple[str, str, str], Obj] = {}  # (namespace, kind, name)
        self._claims: dict[tuple[str, str], Path] = {}  # (namespace, claim) -> its volume's directory
        self._tokens: dict[tuple[str, str, int, str | None], str] = {}  # (pod uid, account, expiry, audience)
        self._services: dict[str, list[Obj]] = {}
        self._node: Obj | None = None
        self._latest: dict[str, Obj] = {}  # pod uid -> the pod with the status still to be written
        self._gone: set[str] = set()  # pods (uids) whose object is gone: nothing more is written
        self._writes: asyncio.Queue[tuple[str, Obj, asyncio.Future[None] | None]] = asyncio.Queue()
        self._events: asyncio.Queue[Obj] = asyncio.Queue()
        self._sent: dict[tuple[str, ...], tuple[str, int]] = {}  # an event's key -> (its name, count)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._write_forever(), name=f"pod status of {self.node_name}"),
                       asyncio.create_task(self._send_events(), name=f"events of {self.node_name}")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _dict(self, obj: Any) -> Obj:
        return self.client.sanitize_for_serialization(obj)

    async def _get(self, read: Callable[..., Any], *args: Any) -> Obj | None:
        try:
            return self._dict(await read(*args))
        except ApiException as e:
            if e.status not in (403, 404):
                raise
            return None

    # --- reads -----------------------------------------------------------------------

    async def prepare(self, pod: Obj) -> None:
        ns = pod["metadata"]["namespace"]
        try:
            for kind, name in references(pod):
                read = self.core.read_namespaced_secret if kind == "Secret" else self.core.read_namespaced_config_map
                found = await self._get(read, name, ns)
                if found is None:
                    self._objects.pop((ns, kind, name), None)
                else:
                    self._objects[(ns, kind, name)] = found
            await self._fetch_claims(pod)
            await self._fetch_tokens(pod)
            services = self._dict(await self.core.list_namespaced_service(ns)).get("items") or []
            if ns != API_SERVICE[0]:
                own = await self._get(self.core.read_namespaced_service, API_SERVICE[1], API_SERVICE[0])
                services += [own] if own else []
            self._services[ns] = services
            self._node = await self._get(self.core.read_node, self.node_name)
        except (ApiException, OSError, asyncio.TimeoutError) as e:  # what was read before stays
            log.warning("node %s: reading what pod %s/%s refers to: %s", self.node_name, ns,
                        pod["metadata"]["name"], e)

    async def _fetch_claims(self, pod: Obj) -> None:
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            self._claims.pop((ns, claim), None)
            pvc = await self._get(self.core.read_namespaced_persistent_volume_claim, claim, ns)
            if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                continue
            pv = await self._get(self.core.read_persistent_volume, (pvc.get("spec") or {}).get("volumeName") or "")
            spec = (pv or {}).get("spec") or {}
            path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
            if path:
                self._claims[(ns, claim)] = Path(path)

    async def _fetch_tokens(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        account = spec.get("serviceAccountName") or "default"
        for vol in spec.get("volumes") or []:
            for src in (vol.get("projected") or {}).get("sources") or []:
                token = src.get("serviceAccountToken")
                if not token:
                    continue
                expiration, audience = int(token.get("expirationSeconds", 3600)), token.get("audience")
                body: Any = {"spec": {"expirationSeconds": expiration, "audiences": [audience] if audience else None,
                                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                                         "uid": meta["uid"]}}}
                answer = await self.core.create_namespaced_service_account_token(account, meta["namespace"], body)
                self._tokens[(meta["uid"], account, expiration, audience)] = answer.status.token

    def lookup(self, namespace: str, kind: str, name: str) -> Obj | None:
        return self._objects.get((namespace, kind, name))

    def services(self, namespace: str) -> Iterable[Obj]:
        return self._services.get(namespace, [])

    def node(self, name: str) -> Obj | None:
        return self._node

    def claim_dir(self, namespace: str, claim: str) -> Path | None:
        return self._claims.get((namespace, claim))

    def token(self, pod: Obj, service_account: str, expiration: int, audience: str | None) -> str:
        key = (pod["metadata"]["uid"], service_account, expiration, audience)
        if key not in self._tokens:
            raise LookupError(f'serviceaccounts "{service_account}" token not issued')
        return self._tokens[key]

    # --- writes ----------------------------------------------------------------------

    def write_status(self, pod: Obj, mutate: Callable[[Obj], None]) -> Obj | None:
        uid = pod["metadata"]["uid"]
        if uid in self._gone:
            return None
        pod = copy.deepcopy(pod)
        mutate(pod.setdefault("status", {}))
        if uid not in self._latest:
            self._writes.put_nowait(("status", pod, None))
        self._latest[uid] = pod
        return pod

    def event(self, pod: Obj, reason: str, message: str, *, type_: str, host: str, field_path: str | None) -> None:
        # a pod from a list has no kind; the event's involvedObject needs it
        self._events.put_nowait(event_body({"kind": "Pod", "apiVersion": "v1", **pod}, reason, message, type_=type_,
                                           component="kubelet", host=host, field_path=field_path))

    async def remove(self, pod: Obj) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writes.put_nowait(("delete", pod, done))
        await done

    async def _write_forever(self) -> None:
        while True:
            kind, pod, done = await self._writes.get()
            uid = pod["metadata"]["uid"]
            try:
                if kind == "status":
                    latest = self._latest.pop(uid, None)
                    if latest is not None and uid not in self._gone:
                        await self._retried(self._patch_status, latest)
                else:
                    await self._retried(self._delete, pod)
            except ApiException as e:
                if e.status in (404, 409):  # gone, or another pod of that name now
                    self._gone.add(uid)
                else:
                    log.warning("node %s: %s of pod %s/%s refused: %s %s", self.node_name, kind,
                                pod["metadata"]["namespace"], pod["metadata"]["name"], e.status, e.body)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def _retried(self, write: Callable[[Obj], Any], pod: Obj) -> None:
        """Until the API server answers (an answer that refuses raises ApiException)."""
        while True:
            try:
                await write(pod)
                return
            except (OSError, asyncio.TimeoutError) as e:
                log.warning("node %s: writing pod %s: %s", self.node_name, pod["metadata"]["name"], e)
                await asyncio.sleep(RETRY_S)

    async def _patch_status(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body: Any = {"metadata": {"uid": meta["uid"]}, "status": pod["status"]}
        await self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body, **MERGE_PATCH)

    async def _delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self._gone.add(meta["uid"])
        body: Any = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        await self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=body)
        self.forget(meta)

    def forget(self, meta: Obj) -> None:
        """Drop what was kept for a pod that is gone (its tokens, its events' counts)."""
        self._tokens = {k: v for k, v in self._tokens.items() if k[0] != meta["uid"]}
        self._sent = {k: v for k, v in self._sent.items() if k[1] != meta["uid"]}

    async def _create_event(self, event: Any) -> None:  # a dict: the client sends it as it is
        """Create it, or count it again on the one already sent (client-go's correlator: the
        same object, reason, message and source)."""
        ns, ref = event["metadata"]["namespace"], event["involvedObject"]
        key = (ns, ref["uid"], ref.get("fieldPath") or "", event["reason"], event["message"])
        if key in self._sent:
            name, count = self._sent[key]
            try:
                await self.core.patch_namespaced_event(name, ns, {"count": count + 1,
                                                                  "lastTimestamp": event["lastTimestamp"]})
                self._sent[key] = (name, count + 1)
                return
            except ApiException as e:
                if e.status != 404:  # expired (the event TTL): a new one
                    raise
        await self.core.create_namespaced_event(ns, event)
        self._sent[key] = (event["metadata"]["name"], 1)

    async def _send_events(self) -> None:
        while True:
            event = await self._events.get()
            try:
                await self._retried(self._create_event, event)
            except ApiException as e:  # e.g. in a terminating namespace: refused, and the kubelet carries on
                log.debug("node %s: event %s refused: %s", self.node_name, event["reason"], e.reason)
