"""Persistent volumes: the default StorageClass, a local-directory provisioner, the PV
binder and PVC protection (kube-controller-manager's persistentvolume-binder and
pvc-protection controllers, with a provisioner like kind's local-path one).

- At start the cluster has one StorageClass, `standard`, marked default
  (`storageclass.kubernetes.io/is-default-class`), provisioner `PROVISIONER`,
  `volumeBindingMode: Immediate`, `reclaimPolicy: Delete`; the DefaultStorageClass
  admission plugin (sim.admission) gives it to claims that name no class.
- A Pending claim binds to an Available PV that fits (its `volumeName`, or class,
  access modes and capacity); failing that, a claim of a class with this provisioner gets
  a new PV `pvc-<claim uid>`: a `hostPath` directory `<data dir>/volumes/<PV name>`,
  mode 0777 as kind's local-path provisioner makes it (so a pod's user, uid 1000 in the
  Jupyter images, writes there; fsGroup is not applied to hostPath volumes), of the
  requested capacity (not enforced). Both then show `Bound`, with the binder's
  annotations. A claim of another class waits `Pending`, as without its provisioner.
- A deleted claim keeps its `kubernetes.io/pvc-protection` finalizer while a pod that is
  not finished uses it. Once it is gone, its PV is `Released`, and with `reclaimPolicy:
  Delete` deleted along with its directory.

`claim_dir()` is the one place that says which directory a claim's pod mounts (the
kubelet waits until it is not `None`, then mounts it).

Not simulated: `WaitForFirstConsumer`, capacity limits, access-mode enforcement across
nodes (every node reaches every directory), selectors on claims, volume expansion,
snapshots, CSI.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Hashable

from ..admission.storage import PVC_PROTECTION
from ..api.storageclasses import PROVISIONER
from .controller import Controller
from ..errors import ApiError
from ..api.quantity import parse as parse_quantity
from ..resources import BY_KIND
from ..store import Change, Obj
from .workloads import record

POD, PVC, PV, SC = BY_KIND["Pod"], BY_KIND["PersistentVolumeClaim"], BY_KIND["PersistentVolume"], \
    BY_KIND["StorageClass"]
COMPONENT = "persistentvolume-controller"


def claim_dir(store: Any, namespace: str, claim: str) -> Path | None:
    """The host directory of a bound claim's volume (its PV's `hostPath` or `local`
    path), None while the claim is missing or not bound."""
    pvc = store.find(PVC, namespace, claim)
    if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
        return None
    pv = store.find(PV, None, (pvc.get("spec") or {}).get("volumeName") or "")
    spec = (pv or {}).get("spec") or {}
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
    return Path(path) if path else None


def _claim_of(pv: Obj) -> tuple[str, str, str] | None:
    ref = (pv.get("spec") or {}).get("claimRef")
    return (ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", "")) if ref else None


def _claims_used_by(pod: Obj | None) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in ((pod or {}).get("spec") or {}).get("volumes") or []
            if isinstance(v, dict) and (v.get("persistentVolumeClaim") or {}).get("claimName")]


def _storage(obj: Obj, *path: str) -> Any:
    cur: Any = obj
    for p in path:
        cur = (cur or {}).get(p)
    return cur


class VolumeController(Controller):
    name = COMPONENT

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self.root = Path(cluster.data_dir) / "volumes"
        self.watch(PVC, self._on_claim)
        self.watch(PV, self._on_volume)
        self.watch(POD, self._on_pod)

    def initial_keys(self) -> list[Hashable]:
        return [("pvc", c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.store.objects(PVC)] + \
            [("pv", "", v["metadata"]["name"]) for v in self.store.objects(PV)]

    def _on_claim(self, change: Change) -> None:
        meta = change.new["metadata"]
        self.enqueue(("pvc", meta["namespace"], meta["name"]))
        if change.type == "DELETED" and (change.new.get("spec") or {}).get("volumeName"):
            self.enqueue(("pv", "", change.new["spec"]["volumeName"]))

    def _on_volume(self, change: Change) -> None:
        self.enqueue(("pv", "", change.new["metadata"]["name"]))
        claim = _claim_of(change.new)
        if claim is not None:
            self.enqueue(("pvc", claim[0], claim[1]))
        if change.type == "ADDED" and claim is None:  # a new static volume may fit a waiting claim
            for c in self.store.objects(PVC):
                if (c.get("status") or {}).get("phase") == "Pending":
                    self.enqueue(("pvc", c["metadata"]["namespace"], c["metadata"]["name"]))

    def _on_pod(self, change: Change) -> None:
        """A pod that goes or finishes may release a claim being deleted."""
        if change.type == "DELETED" or (change.new.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            for claim in _claims_used_by(change.new):
                self.enqueue(("pvc", change.new["metadata"]["namespace"], claim))

    def reconcile(self, key: tuple[str, str, str]) -> None:
        kind, ns, name = key
        if kind == "pv":
            self._sync_volume(name)
            return
        pvc = self.store.find(PVC, ns, name)
        if pvc is None:
            return
        if pvc["metadata"].get("deletionTimestamp"):
            self._protect(pvc)
        elif (pvc.get("status") or {}).get("phase") != "Bound":
            self._bind(pvc)

    # --- binding -----------------------------------------------------------------------

    def _bind(self, pvc: Obj) -> None:
        spec = pvc.get("spec") or {}
        pv = None
        if spec.get("volumeName"):
            pv = self.store.find(PV, None, spec["volumeName"])
            claim = _claim_of(pv) if pv else None
            if pv is None or (claim is not None and claim[2] != pvc["metadata"]["uid"]):
                return  # waits for its volume, as the binder does
        else:
            pv = self._matching_volume(pvc)
        provisioned = False
        if pv is None:
            sc = self.store.find(SC, None, spec.get("storageClassName") or "")
            if sc is None or sc.get("provisioner") != PROVISIONER:
                return  # no provisioner of ours: Pending, as with a class nobody serves
            pv, provisioned = self._provision(pvc, sc), True
        self._bind_pair(pvc, pv, provisioned)

    def _matching_volume(self, pvc: Obj) -> Obj | None:
        spec = pvc.get("spec") or {}
        want = parse_quantity(_storage(spec, "resources", "requests", "storage") or 0)
        modes = set(spec.get("accessModes") or [])
        fits = []
        for pv in self.store.objects(PV):
            pspec = pv.get("spec") or {}
            if (pv.get("status") or {}).get("phase") != "Available" or pspec.get("claimRef"):
                continue
            if (pspec.get("storageClassName") or "") != (spec.get("storageClassName") or ""):
                continue
            if not modes <= set(pspec.get("accessModes") or []):
                continue
            size = parse_quantity(_storage(pspec, "capacity", "storage") or 0)
            if size >= want:
                fits.append((size, pv["metadata"]["name"], pv))
        return min(fits)[2] if fits else None  # the smallest that fits

    def _provision(self, pvc: Obj, sc: Obj) -> Obj:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        name = f"pvc-{meta['uid']}"
        existing = self.store.find(PV, None, name)
        if existing is not None:
            return existing
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
        pv = self.cluster.create(PV, {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
            "spec": {
                "capacity": {"storage": _storage(spec, "resources", "requests", "storage")},
                "accessModes": list(spec.get("accessModes") or []),
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": self._claim_ref(pvc),
            },
        })
        record(self.cluster, pvc, "ProvisioningSucceeded", f"Successfully provisioned volume {name}", PROVISIONER)
        return pv

    @staticmethod
    def _claim_ref(pvc: Obj) -> dict[str, Any]:
        meta = pvc["metadata"]
        return {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", "")}

    def _bind_pair(self, pvc: Obj, pv: Obj, provisioned: bool) -> None:
        ref = self._claim_ref(pvc)
        pv_name = pv["metadata"]["name"]
        def bind_volume(o: Obj) -> None:
            o["spec"]["claimRef"] = ref
            if not provisioned:
                o["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bound-by-controller"] = "yes"
            o["status"] = {"phase": "Bound"}

        self.store.update(PV, None, pv_name, bind_volume)
        chose = not (pvc.get("spec") or {}).get("volumeName")
        pspec = pv.get("spec") or {}

        def bind(o: Obj) -> None:
            o["spec"]["volumeName"] = pv_name
            annotations = o["metadata"].setdefault("annotations", {})
            annotations["pv.kubernetes.io/bind-completed"] = "yes"
            if chose:
                annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
            if provisioned:
                annotations["volume.kubernetes.io/storage-provisioner"] = PROVISIONER
                annotations["volume.beta.kubernetes.io/storage-provisioner"] = PROVISIONER
            o["status"] = {"phase": "Bound", "accessModes": list(pspec.get("accessModes") or []),
                           "capacity": dict(pspec.get("capacity") or {})}

        self.store.update(PVC, pvc["metadata"]["namespace"], pvc["metadata"]["name"], bind)

    # --- release -----------------------------------------------------------------------

    def _protect(self, pvc: Obj) -> None:
        """pvc-protection: the finalizer goes once no unfinished pod uses the claim."""
        meta = pvc["metadata"]
        if PVC_PROTECTION not in (meta.get("finalizers") or []):
            return
        for pod in self.store.objects(POD):
            if pod["metadata"].get("namespace") == meta["namespace"] and meta["name"] in _claims_used_by(pod) \
                    and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                return
        self.store.update(PVC, meta["namespace"], meta["name"], lambda o: o["metadata"].__setitem__(
            "finalizers", [f for f in o["metadata"].get("finalizers") or [] if f != PVC_PROTECTION]))

    def _sync_volume(self, name: str) -> None:
        pv = self.store.find(PV, None, name)
        if pv is None:
            return
        claim = _claim_of(pv)
        phase = (pv.get("status") or {}).get("phase")
        if claim is None:
            if phase not in ("Available", "Failed", "Released"):
                self.store.update(PV, None, name, lambda o: o.__setitem__("status", {"phase": "Available"}))
            return
        pvc = self.store.find(PVC, claim[0] or None, claim[1])
        if pvc is not None and pvc["metadata"]["uid"] == claim[2]:
            return
        if pvc is None and phase in ("Pending", "Available"):
            return  # reserved for a claim not yet created (a pre-bound volume)
        # its claim is gone: released, and deleted with its directory under Delete
        if (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete":
            try:
                self.store.delete(PV, None, name)
            except ApiError as e:
                if e.code != 404:
                    raise
            path = (pv["spec"].get("hostPath") or {}).get("path")
            if path and Path(path).parent == self.root:
                shutil.rmtree(path, ignore_errors=True)
        elif phase != "Released":
            self.store.update(PV, None, name, lambda o: o.__setitem__("status", {"phase": "Released"}))
