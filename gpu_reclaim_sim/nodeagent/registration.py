"""One node's presence in the cluster, as the kubelet keeps it: it registers the Node, renews
the node's Lease in `kube-node-lease` (every `renew_interval`, a quarter of the Lease's 40 s,
as the kubelet does: the node lifecycle controller reads a Lease not renewed for its grace
period as a node gone, taints it and evicts its pods) and reports its status again every
`report_interval` (the kubelet's nodeStatusReportFrequency, 5 min) or when it changes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..api.timestamps import micro_time, rfc3339

log = logging.getLogger("gpu_reclaim_sim.nodeagent.registration")

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
RENEW_INTERVAL_S = LEASE_DURATION_S / 4
REPORT_INTERVAL_S = 300.0


class NodeRegistration:
    """`manifest`: the Node as the node agent registers it (sim.kubelet.nodes.node_manifest);
    `api`: a client that authenticates as the node itself (system:node:<name>)."""

    def __init__(self, api: k8s.ApiClient, manifest: dict[str, Any], *, renew_interval: float = RENEW_INTERVAL_S,
                 report_interval: float = REPORT_INTERVAL_S) -> None:
        self.core, self.leases = k8s.CoreV1Api(api), k8s.CoordinationV1Api(api)
        self.manifest = manifest
        self.name: str = manifest["metadata"]["name"]
        self.renew_interval, self.report_interval = renew_interval, report_interval
        self.uid = ""

    async def register(self) -> None:
        """Create the Node; one registered before (the agent restarted) gets its labels and
        status again, as the kubelet reconciles an existing Node."""
        body: Any = self.manifest  # the client sends a dict as it is (typed for its models)
        try:
            node = await self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
            await self.core.patch_node(self.name, {"metadata": {"labels": self.manifest["metadata"]["labels"]}})
            node = await self.core.patch_node_status(self.name, {"status": self._status()})
        self.uid = node.metadata.uid
        await self._renew()
        log.info("node %s registered", self.name)

    async def run(self) -> None:
        """Renew the Lease and report the status until cancelled; a failed renewal is tried
        again at the next interval, as the kubelet does."""
        since_report = 0.0
        while True:
            await asyncio.sleep(self.renew_interval)
            since_report += self.renew_interval
            try:
                await self._renew()
                if since_report >= self.report_interval:
                    await self.core.patch_node_status(self.name, {"status": self._status()})
                    since_report = 0.0
            except (ApiException, OSError, asyncio.TimeoutError) as e:
                log.warning("node %s: renewing its lease: %s", self.name, e)

    def _status(self) -> dict[str, Any]:
        now = rfc3339()
        status = self.manifest["status"]
        for condition in status["conditions"]:
            condition["lastHeartbeatTime"] = now
        return status

    async def _renew(self) -> None:
        lease: Any = {"metadata": {"name": self.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [
                     {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}]},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_DURATION_S,
                          "renewTime": micro_time()}}
        try:
            await self.leases.patch_namespaced_lease(self.name, LEASE_NAMESPACE, {"spec": lease["spec"]})
        except ApiException as e:
            if e.status != 404:
                raise
            await self.leases.create_namespaced_lease(LEASE_NAMESPACE, lease)
