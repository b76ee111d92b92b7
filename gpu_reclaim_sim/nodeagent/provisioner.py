"""The cluster's volume provisioner on the real control plane, as kind's local-path provisioner
is one (an external provisioner: sig-storage-lib-external-provisioner's protocol).

kube-controller-manager's PV controller marks each pending claim of a class whose provisioner is
not built in with `volume.kubernetes.io/storage-provisioner`, once the scheduler has chosen a node
for a pod that uses it (`volume.kubernetes.io/selected-node`); the provisioner follows the
claims (a `ListWatch`) and, for one marked with its name (sim.api.storageclasses.PROVISIONER)
and not yet bound, makes a PersistentVolume `pvc-<claim uid>`: a `hostPath` directory
`<volumes>/<PV name>` (0777 as local-path makes it, so a pod's user, uid 1000 in the Jupyter
images, writes there), of the requested capacity (not enforced), with no node affinity (unlike
local-path's: every node is this machine, so the volume is reached from any, as a cloud's disk is
from any node of its zone, and a home outlives the node its first pod ran on), with a `claimRef` to the
claim, which the PV controller then binds. It follows the PVs too: one of its own that is
`Released` with reclaim policy Delete goes, with its directory (the PV controller leaves
deleting an external provisioner's volumes to it). It works as a user of its own (`USER`) with a
ClusterRole (`RULES`, installed by the agent: sim.nodeagent.clusterroles), beside the default
StorageClass it serves (`install_storage_class`), as local-path's manifest installs them.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from ..api.storageclasses import PROVISIONER, default_storage_class
from ..events import event_body
from ..objects import Obj
from .podwatch import ListWatch

log = logging.getLogger("gpu_reclaim_sim.nodeagent.provisioner")

USER = "gpu-reclaim-sim:provisioner"
RULES = [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch", "create", "delete"]},
         {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
SELECTED = "volume.kubernetes.io/storage-provisioner"  # set on a claim by the PV controller
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


async def install_storage_class(admin: k8s.ApiClient) -> None:
    """The StorageClass (left as it is if there: the admin's to change)."""
    try:
        await k8s.StorageV1Api(admin).create_storage_class(default_storage_class())  # type: ignore[arg-type]
    except ApiException as e:
        if e.status != 409:
            raise


class Provisioner:
    def __init__(self, api: k8s.ApiClient, volumes: Path) -> None:
        self.core, self.volumes = k8s.CoreV1Api(api), volumes
        self.watches = [ListWatch(self.core.list_persistent_volume_claim_for_all_namespaces, "provisioner: claims",
                                  self._claim),
                        ListWatch(self.core.list_persistent_volume, "provisioner: volumes", self._volume)]
        self._tasks: list[asyncio.Task[None]] = []
        self._busy: set[str] = set()  # the claims and volumes (uids) being worked on

    def start(self) -> None:
        self.volumes.mkdir(parents=True, exist_ok=True)
        self._tasks = [asyncio.create_task(w.run(), name=w.what) for w in self.watches]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _claim(self, type_: str, pvc: Obj) -> None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        if type_ != "DELETED" and (meta.get("annotations") or {}).get(SELECTED) == PROVISIONER \
                and not spec.get("volumeName") and (pvc.get("status") or {}).get("phase") == "Pending":
            self._work(meta["uid"], self._provision(pvc))

    def _volume(self, type_: str, pv: Obj) -> None:
        meta, spec = pv["metadata"], pv.get("spec") or {}
        if type_ != "DELETED" and (meta.get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER \
                and (pv.get("status") or {}).get("phase") == "Released" \
                and spec.get("persistentVolumeReclaimPolicy") == "Delete":
            self._work(meta["uid"], self._delete(pv))

    def _work(self, uid: str, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` unless the same object is being worked on (a watch delivers it again)."""
        if uid in self._busy:
            work.close()
            return
        self._busy.add(uid)
        task = asyncio.create_task(work)
        self._tasks.append(task)

        def done(task: asyncio.Task[None]) -> None:
            self._busy.discard(uid)
            self._tasks.remove(task)
        task.add_done_callback(done)

    async def _provision(self, pvc: Obj) -> None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        name = f"pvc-{meta['uid']}"
        path = self.volumes / name
        path.mkdir(exist_ok=True)
        path.chmod(0o777)
        body: Any = {"metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}}, "spec": {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": spec.get("storageClassName"),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}}}
        try:
            await self.core.create_persistent_volume(body)
        except ApiException as e:
            if e.status != 409:  # made already (the watch delivered the claim again)
                log.warning("provisioning %s for %s/%s refused: %s", name, meta["namespace"], meta["name"], e.reason)
                return
        else:
            await self._event(pvc, "ProvisioningSucceeded", f"Successfully provisioned volume {name}")

    async def _delete(self, pv: Obj) -> None:
        path = ((pv.get("spec") or {}).get("hostPath") or {}).get("path")
        if path and Path(path).parent == self.volumes:  # only a directory it made
            await asyncio.to_thread(shutil.rmtree, path, True)
        try:
            await self.core.delete_persistent_volume(pv["metadata"]["name"])
        except ApiException as e:
            if e.status != 404:
                log.warning("deleting volume %s refused: %s", pv["metadata"]["name"], e.reason)

    async def _event(self, pvc: Obj, reason: str, message: str) -> None:
        body: Any = event_body({"kind": "PersistentVolumeClaim", "apiVersion": "v1", **pvc}, reason, message,
                          type_="Normal", component=PROVISIONER, host=None, field_path=None)
        try:
            await self.core.create_namespaced_event(pvc["metadata"]["namespace"], body)
        except ApiException as e:
            log.debug("event %s refused: %s", reason, e.reason)
