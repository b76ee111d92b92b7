"""The spawner's view of the cluster: one list+watch of every node and every pod, shared by
every spawner of the hub (image locality, image sizes, the GPUs free now), and what the spawn
form and a waiting user's spawn page say of the GPUs from it (free_gpus)."""

from __future__ import annotations

import html
from typing import Any

from jupyterhub.utils import maybe_future, url_path_join

from . import free_gpus, messages
from .informer import Informer
from .reclaim_window import ReclaimWindow


class ClusterView(ReclaimWindow):
    _informers: dict[str, Informer] = {}  # shared by every spawner of the hub

    async def _informer(self, what: str) -> Informer:
        """The shared list+watch of every node ("nodes") or every pod ("pods"); started on
        first use, tried again on the next spawn if it could not start."""
        informer = ClusterView._informers.get(what)
        if informer is None:
            method = self.api.list_node if what == "nodes" else self.api.list_pod_for_all_namespaces
            informer = ClusterView._informers[what] = Informer(method, what)
        try:
            await informer.start()
        except Exception:
            ClusterView._informers.pop(what, None)
            raise
        return informer

    async def _cluster(self) -> tuple[dict[str, dict], list[dict]] | None:
        """Every node by name and every pod; None without them (no RBAC for nodes and pods
        cluster-wide: the form and the spawn page then say nothing of free GPUs)."""
        try:
            nodes, pods = await self._informer("nodes"), await self._informer("pods")
        except Exception as e:
            self.log.debug("no view of the cluster's GPUs for %s: %s", self._log_name, e)
            return None
        return ({n["metadata"]["name"]: n for n in nodes.resources.values()}, list(pods.resources.values()))

    async def _profiles(self) -> list[dict]:
        profiles: Any = self.profile_list
        if callable(profiles):
            profiles = await maybe_future(profiles(self))
        # a dict in KubeSpawner's order (its form's): by key
        return self._sorted_dict_values(profiles) if isinstance(profiles, dict) else list(profiles or [])

    async def room(self) -> tuple[str, list[dict]]:
        """What the spawn form says of the GPUs: its line on the GPUs of each kind free now
        and the queue, and the profile list with, in each GPU profile's description, whether
        it would start now (messages.profile_room_message, as text: the description itself
        is the admin's HTML, as KubeSpawner renders it); ("", []) without GPU profiles or a
        view of the cluster (the form is then KubeSpawner's own)."""
        profiles = await self._profiles()
        if not any(free_gpus.profile_gpus(p) for p in profiles):
            return "", []
        cluster = await self._cluster()
        if cluster is None:
            return "", []
        room = free_gpus.gpu_room(cluster[0].values(), cluster[1])
        placement = {k: getattr(self, k) for k in free_gpus.PLACEMENT}
        return (messages.room_message(room.free, room.total, room.waiting, room.waiting_gpus),
                [_with_room(p, free_gpus.profile_room(p, *cluster, placement)) for p in profiles])

    async def smaller_offer(self, pod: dict) -> tuple[str, str] | None:
        """What a pod waiting for GPUs is offered, as text and as HTML (linking to the hub's
        home page): a smaller GPU profile that would start now; None when none would."""
        cluster = await self._cluster()
        fit = free_gpus.smaller_fit(pod, await self._profiles(), *cluster) if cluster else None
        if fit is None:
            return None
        name = fit[0].get("display_name") or fit[0].get("slug", "")
        return (messages.smaller_fit_message(name, fit[1]),
                messages.smaller_fit_message(name, fit[1], url_path_join(self.hub.base_url, "home")))


def _with_room(profile: dict, room: free_gpus.ProfileRoom | None) -> dict:
    """The profile with whether it starts now after its description (a copy), as text."""
    if room is None:
        return profile
    line = html.escape(messages.profile_room_message(room.free, room.total, room.fits))
    return {**profile, "description": f'{profile.get("description") or ""}<span class="gpu-fit d-block">{line}</span>'}
