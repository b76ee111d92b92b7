"""What a pod's worker (sim.kubelet.podworker) reads and writes of the cluster, through one
small door (`PodApi`): the pod's status, its Events and its final delete; the Secrets and
ConfigMaps it refers to, the Services whose variables its containers get, its node, its
claims' volumes and its service account tokens.

Its implementation is the real API server's, with the node's own credentials
(sim.nodeagent.apipodapi): a protocol, so that the kubelet's folder does not import the node
agent's. The reads
are synchronous, as the volume and environment code that makes them: an implementation
that must ask over the network fetches what a pod refers to in `prepare`, which the worker
awaits before it mounts the pod's volumes and before each start of a container (the
kubelet's own secret and configmap managers fetch what a pod refers to when it is added).
The writes are synchronous too and may be sent in the background (the kubelet's status
manager and event broadcaster do so); `remove` comes after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from ..objects import Obj


class PodApi(Protocol):
    async def prepare(self, pod: Obj) -> None:
        """Fetch what `pod` refers to, for the reads below."""

    def lookup(self, namespace: str, kind: str, name: str) -> Obj | None:
        """A Secret or ConfigMap of the pod's namespace (None: not there)."""

    def services(self, namespace: str) -> Iterable[Obj]:
        """The Services a pod of `namespace` may see (sim.kubelet.names.service_env picks)."""

    def node(self, name: str) -> Obj | None: ...

    def claim_dir(self, namespace: str, claim: str) -> Path | None:
        """The host directory of a bound claim's volume; None: missing or not bound."""

    def token(self, pod: Obj, service_account: str, expiration: int, audience: str | None) -> str:
        """A token of `service_account` bound to `pod` (TokenRequest)."""

    def write_status(self, pod: Obj, mutate: Callable[[Obj], None]) -> Obj | None:
        """Apply `mutate` to the pod's status; the pod as it is now (None: gone, or another
        pod of the same name)."""

    def event(self, pod: Obj, reason: str, message: str, *, type_: str, host: str, field_path: str | None) -> None:
        """An Event about `pod` from the kubelet on `host` (refused ones are only logged)."""

    async def remove(self, pod: Obj) -> None:
        """The kubelet's final delete, once the pod's containers have stopped."""
