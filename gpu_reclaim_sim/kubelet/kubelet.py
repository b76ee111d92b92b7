"""A simulated kubelet of the old simulator (sim.cluster): one per node. It registers the Node
in the in-process store, pulls images (sim.kubelet.pulls) and runs each pod bound to its node
in a `podworker.PodWorker`, which reads and writes the cluster through the store
(`podapi.StorePodApi`): it waits for a pod's claims to be bound
(sim.controllers.persistentvolumes), sets up its volumes (sim.kubelet.volumes) and /etc/hosts
(sim.kubelet.hosts, with Service names from sim.kubelet.names, kept current), gives containers
the Service variables (sim.kubelet.names), starts them through the container runtime
(sim.kubelet.runtime: isolated local processes in process mode, nothing in stub mode), restarts
them with the kubelet's back-off (sim.kubelet.backoff), reports pod status and events in the
real kubelet's words, and stops containers with SIGTERM, then SIGKILL after the grace period,
before removing the pod object. On the real control plane the node agent
(sim.nodeagent) runs the same workers through the real API.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from .nodes import node_manifest, with_image
from .podapi import StorePodApi, remove_from_store
from .podworker import PodWorker, dispatch
from .pulls import ImagePuller
from ..resources import BY_KIND
from ..scenario import NodeGroup
from ..store import Filter, Obj

log = logging.getLogger("gpu_reclaim_sim.kubelet.kubelet")

POD, NODE = BY_KIND["Pod"], BY_KIND["Node"]


class Kubelet:
    def __init__(self, cluster: Any, name: str, group: NodeGroup) -> None:
        self.cluster = cluster
        self.api = StorePodApi(cluster)
        self.name = name
        self.group = group
        self.address = ""
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self.puller = ImagePuller(cluster.images, group.images, group.bandwidth, self._add_image)

    @property
    def store(self):
        return self.cluster.store

    @property
    def images(self) -> set[str]:
        return self.puller.images

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
                remove_from_store(self.store, pod)  # the pod garbage collector's job for a gone node
            if self.store.find(NODE, None, self.name):
                self.store.remove(NODE, None, self.name)
        self.cluster.gpus.remove_node(self.name)
        self.cluster.network.nodes.release(self.address)

    def on_pod(self, type_: str, pod: Obj) -> None:
        """A change to a pod bound to this node (the cluster routes them: one watch for
        all kubelets instead of one each keeps every store write cheap at scale)."""
        dispatch(self, type_, pod)

    async def pull(self, worker: PodWorker, container: Obj) -> None:
        await self.puller.pull(worker, container)

    def _add_image(self, ref: str) -> None:
        entry = self.cluster.images.status_entry(ref)

        def add(node: Obj) -> None:
            node["status"]["images"] = with_image(node["status"].get("images", []), entry)

        self.store.update(NODE, None, self.name, add)
