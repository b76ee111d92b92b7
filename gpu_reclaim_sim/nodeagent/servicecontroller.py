"""Load balancers for `type: LoadBalancer` Services on the real control plane, as a cloud's
service controller (cloud-provider-kind, or MetalLB on bare metal) provides them; the real
control plane runs no cloud controller.

It follows the Services (a `ListWatch`) and gives each LoadBalancer Service an address of
`NETWORK` (in the run's network namespace a /24 of its nodes' network, so kube-proxy's rules
there, sim.network.dataplane, send it to the Service's endpoints; outside one, loopback) in
`status.loadBalancer.ingress` (`spec.loadBalancerIP` when it asks for a free one there), with
the service controller's `EnsuringLoadBalancer` / `EnsuredLoadBalancer` events, and takes it
back when the Service changes type (`DeletedLoadBalancer`) or goes. It works as a user of its
own (`USER`, a ClusterRole with `RULES`, as cloud-provider-kind's manifest grants).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..events import event_body
from ..network import namespace
from ..objects import Obj
from .apipodapi import MERGE_PATCH
from .podwatch import ListWatch

log = logging.getLogger("gpu_reclaim_sim.nodeagent.servicecontroller")

USER = "gpu-reclaim-sim:service-controller"
RULES = [{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": [""], "resources": ["services/status"], "verbs": ["patch", "update"]},
         {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
COMPONENT = "service-controller"


def network() -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network("10.0.255.0/24") if namespace.inside() else ipaddress.IPv4Network("127.101.0.0/24")


class ServiceController:
    def __init__(self, api: k8s.ApiClient) -> None:
        self.core = k8s.CoreV1Api(api)
        self.network = network()
        self.addresses: dict[str, str] = {}  # Service uid -> its address
        self.watch = ListWatch(self.core.list_service_for_all_namespaces, "service controller", self._service)
        self._tasks: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.watch.run(), name=self.watch.what)

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _service(self, type_: str, svc: Obj) -> None:
        uid = svc["metadata"]["uid"]
        have = [i.get("ip") for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]
        wants = type_ != "DELETED" and (svc.get("spec") or {}).get("type") == "LoadBalancer" \
            and not svc["metadata"].get("deletionTimestamp")
        if type_ == "DELETED":
            self.addresses.pop(uid, None)
        elif wants and have:
            self.addresses[uid] = have[0]  # its own (after a restart of the agent too)
        elif wants:
            self._run(self._ensure(svc, self._address(svc)))
        elif have:
            self.addresses.pop(uid, None)
            self._run(self._delete(svc))

    def _address(self, svc: Obj) -> str:
        used = set(self.addresses.values())
        asked = (svc.get("spec") or {}).get("loadBalancerIP")
        if asked:
            try:
                if ipaddress.ip_address(asked) in self.network and asked not in used:
                    self.addresses[svc["metadata"]["uid"]] = asked
                    return asked
            except ValueError:
                pass
            log.warning("service %s/%s: loadBalancerIP %s is not free in %s; another is given",
                        svc["metadata"]["namespace"], svc["metadata"]["name"], asked, self.network)
        ip = next((str(h) for h in self.network.hosts() if str(h) not in used), None)
        if ip is None:
            raise RuntimeError(f"no load-balancer address left in {self.network}")
        self.addresses[svc["metadata"]["uid"]] = ip
        return ip

    def _run(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ensure(self, svc: Obj, ip: str) -> None:
        await self._event(svc, "EnsuringLoadBalancer", "Ensuring load balancer")
        if await self._patch(svc, {"ingress": [{"ip": ip, "ipMode": "VIP"}]}):
            await self._event(svc, "EnsuredLoadBalancer", "Ensured load balancer")

    async def _delete(self, svc: Obj) -> None:
        if await self._patch(svc, {"ingress": None}):  # null: a merge patch's removal
            await self._event(svc, "DeletedLoadBalancer", "Deleted load balancer")

    async def _patch(self, svc: Obj, balancer: Obj) -> bool:
        meta = svc["metadata"]
        body: Any = {"metadata": {"uid": meta["uid"]}, "status": {"loadBalancer": balancer}}
        try:
            await self.core.patch_namespaced_service_status(meta["name"], meta["namespace"], body, **MERGE_PATCH)
            return True
        except ApiException as e:
            if e.status not in (404, 409):
                log.warning("service %s/%s: its load balancer refused: %s", meta["namespace"], meta["name"], e.reason)
            return False

    async def _event(self, svc: Obj, reason: str, message: str) -> None:
        body: Any = event_body({"kind": "Service", "apiVersion": "v1", **svc}, reason, message, type_="Normal",
                               component=COMPONENT, host=None, field_path=None)
        try:
            await self.core.create_namespaced_event(svc["metadata"]["namespace"], body)
        except ApiException as e:
            log.debug("event %s refused: %s", reason, e.reason)
