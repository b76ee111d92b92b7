"""A node's image puller: the kubelet's events for each container's image, one pull at a
time (the kubelet's default serializeImagePulls), each taking the image's size over the
node's bandwidth; `on_pulled` reports a new image (the Node's `status.images`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from .containerconfig import ContainerError
from .images import ImageRegistry
from ..api.imagerefs import normalize
from ..api.timestamps import go_duration
from ..objects import Obj


class Worker(Protocol):
    def event(self, reason: str, message: str, container: Obj | None = None, type_: str = "Normal") -> None: ...


class ImagePuller:
    def __init__(self, registry: ImageRegistry, present: Iterable[str], bandwidth: float,
                 on_pulled: Callable[[str], None]) -> None:
        self.registry = registry
        self.images: set[str] = {normalize(i) for i in present}
        self.bandwidth = bandwidth
        self.on_pulled = on_pulled
        self._lock = asyncio.Lock()

    async def pull(self, worker: Worker, container: Obj) -> None:
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
        async with self._lock:
            started = time.monotonic()
            size = self.registry.size(ref)
            # an image already here still costs a manifest check with policy Always
            await asyncio.sleep(0.1 if normalize(ref) in self.images else size / self.bandwidth)
            self.images.add(normalize(ref))
            self.on_pulled(ref)
        done = time.monotonic()
        worker.event("Pulled", f'Successfully pulled image "{ref}" in {go_duration(done - started)} '
                     f'({go_duration(done - queued)} including waiting). Image size: {size} bytes.', container)
