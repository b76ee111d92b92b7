"""A namespace's lifecycle, as the namespace controller and the NamespaceLifecycle admission
plugin keep it: deleting a namespace marks it Terminating and deletes what it holds
(`terminate`), it goes once nothing is left in it (`remove_if_empty`), and a namespace that
is missing or terminating takes no new content (`check`). The store calls these inside
its writes, as it always did; they reach the store only through `Objects`."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from . import errors
from .resources import ALL, BY_KIND, ResourceType
from .api.timestamps import rfc3339


class Objects(Protocol):
    """What of sim.store's `Store` a namespace's lifecycle uses (the store imports this
    module, so this one names no type of it)."""

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def objects(self, rtype: ResourceType) -> Iterable[dict[str, Any]]: ...

    def update(self, rtype: ResourceType, namespace: str | None, name: str,
               mutate: Callable[[dict[str, Any]], Any]) -> dict[str, Any]: ...

    def delete(self, rtype: ResourceType, namespace: str | None, name: str) -> tuple[dict[str, Any], bool]: ...

    def remove(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]: ...


def terminate(store: Objects, ns_obj: dict[str, Any]) -> dict[str, Any]:
    name = ns_obj["metadata"]["name"]
    ns_type = BY_KIND["Namespace"]

    def terminating(o: dict[str, Any]) -> None:
        o["metadata"].setdefault("deletionTimestamp", rfc3339())
        o.setdefault("status", {})["phase"] = "Terminating"

    ns_obj = store.update(ns_type, None, name, terminating)
    for rtype in ALL:
        if not rtype.namespaced:
            continue
        for obj in [o for o in store.objects(rtype) if o["metadata"].get("namespace") == name]:
            store.delete(rtype, name, obj["metadata"]["name"])
    remove_if_empty(store, name)
    return ns_obj


def remove_if_empty(store: Objects, name: str) -> None:
    ns_obj = store.find(BY_KIND["Namespace"], None, name)
    if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
        return
    for rtype in ALL:
        if rtype.namespaced and any(
            o["metadata"].get("namespace") == name for o in store.objects(rtype)
        ):
            return
    store.remove(BY_KIND["Namespace"], None, name)


def check(store: Objects, rtype: ResourceType, ns: str, name: str) -> None:
    """The NamespaceLifecycle admission plugin: no namespace is a 404, a terminating
    one refuses new content with a 403 (the name is empty for generateName: the
    plugin runs before the name is generated)."""
    obj = store.find(BY_KIND["Namespace"], None, ns)
    if obj is None:
        raise errors.not_found("namespaces", ns)
    if obj["metadata"].get("deletionTimestamp"):
        raise errors.forbidden(
            rtype.plural, name, f"unable to create new content in namespace {ns} because it is being "
            "terminated", rtype.group, causes=[{"reason": "NamespaceTerminating",
                                                "message": f"namespace {ns} is being terminated",
                                                "field": "metadata.namespace"}])
