"""Load balancers for `type: LoadBalancer` Services, as a cloud's service controller (or
MetalLB on a bare-metal cluster) provides them.

Each such Service gets an address from the last /24 of the service network (inside
127.0.0.0/8, so a test on this machine reaches it) in `status.loadBalancer.ingress`
(`spec.loadBalancerIP` when it asks for a free one there), with the service controller's
`EnsuringLoadBalancer` / `EnsuredLoadBalancer` events; the address goes back when the
Service goes or changes type. kube-proxy's rules (sim.network.dataplane) send connections to
that address and the Service's ports to its endpoints, as a cloud load balancer does.
NodePorts are allocated by the apiserver but nothing listens on them.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Hashable

from ..admission.services import allocate_ip, load_balancer_range, used_service_ips
from ..controllers.controller import Controller
from ..resources import BY_KIND
from ..store import Obj
from ..controllers.workloads import record

log = logging.getLogger("gpu_reclaim_sim.network.loadbalancers")

SVC = BY_KIND["Service"]
COMPONENT = "service-controller"


def ingress_ips(svc: Obj) -> list[str]:
    return [i["ip"] for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            if i.get("ip")]


class LoadBalancerController(Controller):
    name = COMPONENT

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self.watch(SVC, lambda ch: self.enqueue((ch.new["metadata"]["namespace"], ch.new["metadata"]["name"])))

    def initial_keys(self) -> list[Hashable]:
        return [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in self.store.objects(SVC)]

    def reconcile(self, key: tuple[str, str]) -> None:
        ns, name = key
        svc = self.store.find(SVC, ns, name)
        if svc is None:
            return
        wants = (svc.get("spec") or {}).get("type") == "LoadBalancer" and not svc["metadata"].get("deletionTimestamp")
        have = ingress_ips(svc)
        if wants and not have:
            record(self.cluster, svc, "EnsuringLoadBalancer", "Ensuring load balancer", COMPONENT)
            ip = self._address(svc)
            self.store.update(SVC, ns, name, lambda o: o.setdefault("status", {}).__setitem__(
                "loadBalancer", {"ingress": [{"ip": ip, "ipMode": "VIP"}]}))
            record(self.cluster, svc, "EnsuredLoadBalancer", "Ensured load balancer", COMPONENT)
        elif have and not wants:
            self.store.update(SVC, ns, name, lambda o: o.setdefault("status", {}).__setitem__("loadBalancer", {}))
            record(self.cluster, svc, "DeletedLoadBalancer", "Deleted load balancer", COMPONENT)

    def _address(self, svc: Obj) -> str:
        pool, used = load_balancer_range(self.store), used_service_ips(self.store)
        asked = (svc.get("spec") or {}).get("loadBalancerIP")
        if asked:
            try:
                if ipaddress.ip_address(asked) in pool and asked not in used:
                    return asked
            except ValueError:
                pass
            log.warning("service %s/%s: loadBalancerIP %s is not free in %s; another is given",
                        svc["metadata"]["namespace"], svc["metadata"]["name"], asked, pool)
        return allocate_ip(pool, used)
