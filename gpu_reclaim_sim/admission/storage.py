"""PersistentVolumeClaims, PersistentVolumes and StorageClasses: defaulting, the
DefaultStorageClass and PVC protection admission plugins, validation."""

from __future__ import annotations

import copy
import json

from ..api.storageclasses import DEFAULT_CLASS_ANNOTATION
from ..resources import BY_KIND
from ..store import Obj, Store
from .validation import Cause, _cause, _quantity

PVC_PROTECTION = "kubernetes.io/pvc-protection"


def _default_pvc(store: Store, pvc: Obj, old: Obj | None = None) -> None:
    spec = pvc.setdefault("spec", {})
    if old is not None:
        for key in ("volumeName", "storageClassName", "volumeMode"):
            if key in (old.get("spec") or {}):
                spec.setdefault(key, old["spec"][key])
    spec.setdefault("volumeMode", "Filesystem")


def _admit_pvc(store: Store, pvc: Obj) -> None:
    """DefaultStorageClass (a claim that names no class gets the default one, if any) and
    the StorageObjectInUseProtection finalizer; the volume binder (sim.controllers.persistentvolumes) binds it."""
    spec = pvc["spec"]
    if spec.get("storageClassName") is None:
        default = default_storage_class(store)
        if default is not None:
            spec["storageClassName"] = default
    finalizers = pvc["metadata"].setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    pvc["status"] = {"phase": "Pending"}


def default_storage_class(store: Store) -> str | None:
    """The class marked `storageclass.kubernetes.io/is-default-class: "true"` (the newest
    if several are, as the admission plugin picks)."""
    marked = [sc for sc in store.objects(BY_KIND["StorageClass"])
              if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
    if not marked:
        return None
    return max(marked, key=lambda sc: (sc["metadata"].get("creationTimestamp", ""),
                                       sc["metadata"]["name"]))["metadata"]["name"]


def _validate_pvc(store: Store, pvc: Obj) -> list[Cause]:
    spec = pvc.get("spec") or {}
    causes: list[Cause] = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(_cause("spec.accessModes", "FieldValueRequired",
                             "Required value: at least 1 access mode is required"))
    allowed = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
    for m in modes:
        if m not in allowed:
            causes.append(_cause("spec.accessModes", "FieldValueNotSupported",
                                 f"Unsupported value: {json.dumps(m)}: supported values: "
                                 + ", ".join(f'"{a}"' for a in allowed)))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(_cause("spec.resources[storage]", "FieldValueRequired", "Required value"))
    elif (quantity := _quantity(storage)) is None or quantity <= 0:
        causes.append(_cause("spec.resources[storage]", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(storage)}: must be greater than zero"))
    return causes


def _validate_pvc_update(store: Store, old: Obj, new: Obj) -> list[Cause]:
    ospec, nspec = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    for spec in (ospec, nspec):
        spec.pop("resources", None)
        spec.pop("volumeAttributesClassName", None)
    if ospec != nspec:
        return [_cause("spec", "FieldValueForbidden",
                       "Forbidden: spec is immutable after creation except resources.requests and "
                       "volumeAttributesClassName for bound claims")]
    return []


def _default_storage_class(store: Store, sc: Obj, old: Obj | None = None) -> None:
    sc.setdefault("reclaimPolicy", "Delete")
    sc.setdefault("volumeBindingMode", "Immediate")


def _validate_storage_class(store: Store, sc: Obj) -> list[Cause]:
    if not sc.get("provisioner"):
        return [_cause("provisioner", "FieldValueRequired", "Required value")]
    return []


def _default_pv(store: Store, pv: Obj, old: Obj | None = None) -> None:
    spec = pv.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")


def _admit_pv(store: Store, pv: Obj) -> None:
    pv["status"] = {"phase": "Pending"}


# what the pipeline does for these kinds: defaulting, admission plugins, validation
DEFAULTERS = {"StorageClass": _default_storage_class, "PersistentVolume": _default_pv,
              "PersistentVolumeClaim": _default_pvc}
CREATE_PLUGINS = {"PersistentVolume": _admit_pv, "PersistentVolumeClaim": _admit_pvc}
VALIDATORS = {"StorageClass": _validate_storage_class, "PersistentVolumeClaim": _validate_pvc}
UPDATE_VALIDATORS = {"PersistentVolumeClaim": _validate_pvc_update}
