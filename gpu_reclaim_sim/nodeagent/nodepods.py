"""The pods the real scheduler binds to one node, run by the node agent as a kubelet runs
them: `PodWatch` follows them, each gets a `PodWorker` (sim.kubelet.podworker, the old
simulator's, reading and writing through the real API: `apipodapi.ApiPodApi`) that runs its
containers as local processes through the container runtime (sim.kubelet.runtime), and the
images it pulls are reported in the Node's `status.images`."""

from __future__ import annotations

import asyncio
import logging

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..kubelet.nodes import with_image
from ..kubelet.podworker import PodWorker, dispatch
from ..kubelet.pulls import ImagePuller
from ..scenario import NodeGroup
from ..objects import Obj
from .local import NodeLocal
from .apipodapi import ApiPodApi
from .podwatch import PodWatch

log = logging.getLogger("gpu_reclaim_sim.nodeagent.nodepods")

STOP_GRACE_S = 2  # the agent stopping: its containers get this long after SIGTERM


class NodePods:
    """The kubelet of node `name` as its pods' workers see it (sim.kubelet.podworker.Kubelet)."""

    def __init__(self, local: NodeLocal, api: k8s.ApiClient, name: str, group: NodeGroup, address: str,
                 manifest: Obj) -> None:
        self.cluster = local
        self.name, self.address = name, address
        self.api = ApiPodApi(api, name)
        self.core = k8s.CoreV1Api(api)
        self.manifest = manifest  # the Node as registered: its status.images grows with each pull
        self.version = manifest["status"]["nodeInfo"]["kubeletVersion"]
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self.puller = ImagePuller(local.images, group.images, group.bandwidth, self._pulled)
        self.watch = PodWatch(api, name, lambda type_, pod: dispatch(self, type_, pod))
        self._image_reports: set[asyncio.Task[None]] = set()
        if group.gpus:
            local.gpus.add_node(name, group.gpus, group.gpu_model, group.gpu_memory_mib, group.sharing)

    async def run(self) -> None:
        self.api.start()
        try:
            await self.watch.run()
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop every container (the pods stay: a kubelet that stops deletes none)."""
        await asyncio.gather(*(w.abandon(grace=STOP_GRACE_S) for w in list(self.workers.values())))
        for report in list(self._image_reports):
            report.cancel()
        await self.api.stop()
        self.cluster.gpus.remove_node(self.name)

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        """The worker of the pod `namespace/name` on this node (the newest, should a pod of
        that name have been made again while the old one's ends)."""
        found = [w for w in self.workers.values() if w.ns == namespace and w.name == name]
        return found[-1] if found else None

    async def pull(self, worker: PodWorker, container: Obj) -> None:
        await self.puller.pull(worker, container)

    def _pulled(self, ref: str) -> None:
        status = self.manifest["status"]
        status["images"] = with_image(status.get("images") or [], self.cluster.images.status_entry(ref))
        task = asyncio.create_task(self._report_images(status["images"]))
        self._image_reports.add(task)
        task.add_done_callback(self._image_reports.discard)

    async def _report_images(self, images: list[Obj]) -> None:
        try:
            await self.core.patch_node_status(self.name, {"status": {"images": images}})
        except (ApiException, OSError, asyncio.TimeoutError) as e:  # the next pull says it again
            log.warning("node %s: reporting its images: %s", self.name, e)
