"""A simulated kubelet: one per node. It registers the Node, pulls images (one at a time,
as the kubelet's default serializeImagePulls does) and runs each pod bound to its node in
a `podworker.PodWorker`, which waits for a pod's claims to be bound
(sim.controllers.persistentvolumes), sets up its volumes (sim.kubelet.volumes) and /etc/hosts (sim.kubelet.hosts,
with Service names from sim.kubelet.names, kept current), gives containers the Service variables
(sim.kubelet.names), starts them through the container runtime (sim.kubelet.runtime: isolated local
processes in process mode, nothing in stub mode), restarts them with the kubelet's
back-off (sim.kubelet.backoff), reports pod status and events in the real kubelet's words, and
stops containers with SIGTERM, then SIGKILL after the grace period, before removing the
pod object.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .containerconfig import ContainerError
from .nodes import MAX_IMAGES, node_manifest
from .podworker import PodWorker, _remove_pod
from ..resources import BY_KIND
from ..scenario import NodeGroup
from ..store import Filter, Obj
from ..api.imagerefs import normalize
from ..api.timestamps import go_duration

log = logging.getLogger("gpu_reclaim_sim.kubelet.kubelet")


POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]














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
                                       self.group.gpu_memory_mib, self.group.sharing)
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
        worker.event("Pulled", f'Successfully pulled image "{ref}" in {go_duration(done - started)} '
                     f'({go_duration(done - queued)} including waiting). Image size: {size} bytes.', container)

    def _add_image(self, ref: str) -> None:
        self.images.add(normalize(ref))
        entry = self.cluster.images.status_entry(ref)

        def add(node: Obj) -> None:
            images = [i for i in node["status"].get("images", []) if normalize(ref) not in i["names"]]
            node["status"]["images"] = sorted(images + [entry], key=lambda e: -e["sizeBytes"])[:MAX_IMAGES]

        self.store.update(NODE, None, self.name, add)
