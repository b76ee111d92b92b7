"""KubeSpawner's pod reflector in a process of its own, as a hub runs it next to the
cluster, reporting when it saw which pod arrive, run and leave (benchmarks/sim_scale.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

from benchmarks.scale.scene import COMPONENT


def reflector_process(conn: Any, namespace: str, expected: int) -> None:
    """Run KubeSpawner's PodReflector as a hub does, reporting when it sees what.

    Protocol on `conn`: it sends ("ready", t); ("running", t) once every one of
    `expected` pods has been seen with phase Running; after ("await_gone",) from the
    parent, ("gone", t) once it holds no pod; after ("stop",), ("data", {...}) and exits."""
    asyncio.run(_reflect(conn, namespace, expected))


async def _reflect(conn: Any, namespace: str, expected: int) -> None:
    from kubespawner.clients import load_config
    from kubespawner.spawner import PodReflector

    first_seen: dict[str, float] = {}  # key -> when the reflector first held it
    seen_via: dict[str, str] = {}  # key -> "watch" or "list"
    running_at: dict[str, float] = {}
    gone_at: dict[str, float] = {}
    relists: list[dict[str, float]] = []
    events = {"set": 0, "pop": 0}

    def on_set(key: str, pod: dict, via: str, t: float) -> None:
        if key not in first_seen:
            first_seen[key], seen_via[key] = t, via
        if key not in running_at and (pod.get("status") or {}).get("phase") == "Running":
            running_at[key] = t

    class Tracked(dict):
        """The reflector's `resources` dict, noting when each pod arrives and leaves."""

        def __setitem__(self, key: str, value: dict) -> None:
            events["set"] += 1
            on_set(key, value, "watch", time.time())
            super().__setitem__(key, value)

        def pop(self, key: str, *default: Any) -> Any:
            events["pop"] += 1
            if key in self:
                gone_at.setdefault(key, time.time())
            return super().pop(key, *default)

    class TimedPodReflector(PodReflector):
        """KubeSpawner's PodReflector; the only addition times its (re)list and swaps the
        freshly listed dict for a `Tracked` one with the same content."""

        async def _list_and_update(self, resource_version=None):
            started = time.time()
            before = set(self.resources)
            rv = await super()._list_and_update(resource_version)
            t = time.time()
            listed = self.resources
            for key, pod in listed.items():
                on_set(key, pod, "list", t)
            for key in before - set(listed):
                gone_at.setdefault(key, t)
            self.resources = Tracked(listed)  # equal content: no change notification
            relists.append({"at": started, "seconds": t - started, "items": len(listed)})
            return rv

    load_config()  # as KubeSpawner.__init__ does, with its default (no) overrides
    reflector = TimedPodReflector(namespace=namespace, labels={"component": COMPONENT})
    await reflector.start()
    await reflector.first_load_future
    conn.send(("ready", time.time()))
    sent_running = False
    awaiting_gone = False
    try:
        while True:
            await asyncio.sleep(0.02)
            if not sent_running and len(running_at) >= expected:
                sent_running = True
                conn.send(("running", max(running_at.values())))
            if awaiting_gone and not reflector.resources:
                awaiting_gone = False
                conn.send(("gone", max(gone_at.values(), default=time.time())))
            while conn.poll():
                msg = conn.recv()
                if msg[0] == "await_gone":
                    awaiting_gone = True
                elif msg[0] == "stop":
                    raise asyncio.CancelledError
    except asyncio.CancelledError:
        pass
    finally:
        await reflector.stop()
        conn.send(("data", {"first_seen": first_seen, "seen_via": seen_via, "running_at": running_at,
                            "gone_at": gone_at, "relists": relists, "events": events,
                            "watch_task_done": reflector.watch_task is None,
                            "cpu_seconds": time.process_time()}))


class ReflectorHandle:
    """The parent's end of the reflector process."""

    def __init__(self, namespace: str, expected: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=reflector_process, args=(child_conn, namespace, expected),
                                name="kubespawner-reflector", daemon=True)
        self.proc.start()
        self.milestones: dict[str, float] = {}
        self.data: dict[str, Any] | None = None

    def _pump(self) -> None:
        while self.conn.poll():
            kind, value = self.conn.recv()
            if kind == "data":
                self.data = value
            else:
                self.milestones[kind] = value

    async def wait_for(self, what: str, timeout: float) -> float | None:
        """When the reflector reported `what`, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._pump()
            if what in self.milestones:
                return self.milestones[what]
            if time.monotonic() > deadline or not self.proc.is_alive():
                return None
            await asyncio.sleep(0.02)

    def send(self, *msg: Any) -> None:
        self.conn.send(msg)

    async def stop(self) -> dict[str, Any]:
        """Stop the reflector and collect what it saw."""
        if self.proc.is_alive():
            self.send("stop")
        deadline = time.monotonic() + 30
        while self.data is None and time.monotonic() < deadline:
            self._pump()
            if self.data is None and not self.proc.is_alive() and not self.conn.poll():
                break
            await asyncio.sleep(0.05)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        return self.data or {}
