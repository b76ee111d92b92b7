"""The controller pattern of kube-controller-manager, for the simulator's controllers.

As client-go's informers and work queues: store changes (`Store.subscribe`, called inside
each write) only put keys on a deduplicating queue; one worker task per controller takes
the keys off and reconciles each object from the store's current state. Nothing polls:
work is proportional to the changes that concern a controller, so thousands of pods that
no controller owns cost each controller one cheap callback per write.

A reconcile that fails is retried with a growing delay (the rate-limited queue); an
`ApiError` is logged briefly, anything else with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Hashable

from ..errors import ApiError
from ..resources import ResourceType
from ..store import Change, Obj

log = logging.getLogger("gpu_reclaim_sim.controllers.controller")

RETRY_BASE = 0.2  # seconds; doubled per failure of one key, up to RETRY_MAX
RETRY_MAX = 30.0


class Controller:
    """Subclasses set `name`, call `watch()` in `__init__`, and implement `reconcile(key)`."""

    name = "controller"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self._subscriptions: list[tuple[ResourceType | None, Callable[[Change], None]]] = []
        self._unsubscribe: list[Callable[[], None]] = []
        self._queue: dict[Hashable, None] = {}  # ordered set of keys waiting
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._failures: dict[Hashable, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    # --- wiring ------------------------------------------------------------------------

    def watch(self, rtype: ResourceType | None, handler: Callable[[Change], None]) -> None:
        """Call `handler(change)` for each change of `rtype` (None: every type) once started."""
        self._subscriptions.append((rtype, handler))

    def initial_keys(self) -> list[Hashable]:
        """Keys to reconcile at start (the informers' initial list)."""
        return []

    async def start(self) -> None:
        for rtype, handler in self._subscriptions:
            self._unsubscribe.append(self.store.subscribe(rtype, handler))
        for key in self.initial_keys():
            self.enqueue(key)
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # --- the queue -----------------------------------------------------------------------

    def enqueue(self, key: Hashable) -> None:
        self._queue[key] = None
        self._wake.set()

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        """Reconcile `key` again after `delay` seconds (e.g. when minReadySeconds pass)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        timer: asyncio.TimerHandle | None = None

        def fire() -> None:
            self._timers.discard(timer)
            self.enqueue(key)

        timer = loop.call_later(max(delay, 0.0), fire)
        self._timers.add(timer)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                key = next(iter(self._queue))
                del self._queue[key]
                self._reconcile_safely(key)
                await asyncio.sleep(0)  # let the API server answer between reconciles

    def _reconcile_safely(self, key: Hashable) -> None:
        try:
            self.reconcile(key)
        except ApiError as e:
            self._retry(key, f"{e.code} {e.message}")
        except Exception:
            log.exception("%s: reconciling %s", self.name, key)
            self._retry(key, "unexpected error")
        else:
            self._failures.pop(key, None)

    def _retry(self, key: Hashable, why: str) -> None:
        n = self._failures[key] = self._failures.get(key, 0) + 1
        delay = min(RETRY_BASE * 2 ** (n - 1), RETRY_MAX)
        log.info("%s: %s: %s; retrying in %.1fs", self.name, key, why, delay)
        self.enqueue_after(key, delay)

    def reconcile(self, key: Any) -> None:
        raise NotImplementedError


def owner_reference(owner: Obj, *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to `owner`, as a controller puts on what it creates."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": controller, "blockOwnerDeletion": True}


def controller_of(obj: Obj | None) -> dict[str, Any] | None:
    """The ownerReference with `controller: true`, if any (metav1.GetControllerOf)."""
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None
