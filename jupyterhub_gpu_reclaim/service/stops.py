"""The reclaimer's stops: each runs as a task, recorded in the store before it begins, so a
server is never stopped twice (the store refuses a second reclaim of an episode, and of a
session whose stop is unfinished). A stop that never finishes is "stuck" and tried again
each cycle; after a restart, stops that were under way are finished (or found done) first.
With --cull-users a user goes too once all of their servers are stopped. In dry run a
reclaim is reported once per episode and nothing is stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from typing import Awaitable, Callable

from .hub_stopper import HubStopper, StopResult
from .cycle_types import Reclaim
from .metrics import Metrics
from ..wording import server_name
from ..policy.evidence import Measured, Recorded
from ..policy.observations import Decision, Session, WhatSaved
from ..policy.decider import decide_user
from ..policy.config import PolicyConfig
from ..signals.http_source import entry_field, entry_time
from ..signals.hub import HubServer
from ..store import Store
from ..timestamps import format_time

log = logging.getLogger("jupyterhub_gpu_reclaim.service")

class Stops:
    def __init__(self, *, stopper: HubStopper, store: Store, metrics: Metrics, policy: PolicyConfig,
                 clock: Callable[[], dt.datetime], dry_run: bool, cull_users: bool,
                 notify: Callable[[Decision, Session, dt.datetime], Awaitable[None]],
                 forget: Callable[[str], None], kernels: object = None, save_wait: float = 0.0) -> None:
        """`notify` tells the user of a reclaim done; `forget` drops a stopped session's history;
        `kernels` (the kernel signal) asks a server's tabs to save before its stop, waiting
        at most `save_wait` s (0: not asked)."""
        self.stopper, self.store, self.metrics, self.policy, self.clock = stopper, store, metrics, policy, clock
        self.dry_run, self.cull_users = dry_run, cull_users
        self.kernels, self.save_wait = kernels, save_wait
        self._dry_saves: set[asyncio.Task] = set()
        self._notify, self._forget = notify, forget
        self.tasks: dict[str, asyncio.Task] = {}  # sid (or "user:NAME") → its stop
        self._would_reclaim: set[str] = set()  # dry run: episodes already reported

    async def drain(self) -> None:
        """Wait for the stops under way."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel the stops under way (shutdown): they stay unfinished in the store and are
        finished after the restart."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()

    def _track(self, task: asyncio.Task, keys: list[str]) -> None:
        for key in keys:
            self.tasks[key] = task
        task.add_done_callback(lambda _t: [self.tasks.pop(k, None) for k in keys])

    # ---- the policy's reclaims

    def reclaim(self, user: str, reclaims: list[Reclaim], servers: list[HubServer],
                now: dt.datetime) -> tuple[list[str], list[str]]:
        """Begin the stops of one user's sessions that the policy reclaims (in dry run, report
        them). Returns (the sessions whose stop began, those reported as dry run)."""
        begun: list[tuple[Reclaim, int]] = []
        would: list[str] = []
        for reclaim in reclaims:
            session, d, episode = reclaim.session, reclaim.decision, reclaim.episode
            if self.dry_run:
                key = f"{session.id} {episode}"
                if key not in self._would_reclaim:
                    self._would_reclaim.add(key)
                    would.append(session.id)
                    self.metrics.reclaims.labels(d.rule, "dry-run").inc()
                    log.info("[dry run] would reclaim %s (%s): %s", server_name(session.id), d.rule, d.reason)
                    task = asyncio.create_task(self._would_save(reclaim), name=f"would save {session.id}")
                    self._dry_saves.add(task)
                    task.add_done_callback(self._dry_saves.discard)
                continue
            # one record per attempt: after a failed stop the next cycle tries again
            rid = self.store.begin_reclaim(session.id, d.rule, now, d.shown(), session.gpus,
                                           episode=f"{episode} {format_time(now)}", ran=reclaim.ran)
            if rid is None:
                continue  # a stop of it is under way or stuck
            begun.append((reclaim, rid))
        if begun:
            # with --cull-users the user goes too once all of their servers are stopped
            mine = [s for s in servers if s.user == user]
            cull_user = self.cull_users and len(begun) == len(mine)
            task = asyncio.create_task(self._stop_all(begun, mine[0] if cull_user else None), name=f"stop {user}")
            self._track(task, [f"user:{user}", *(r.session.id for r, _ in begun)])
        return [r.session.id for r, _ in begun], would

    async def _save_first(self, reclaim: Reclaim, dry_run: bool) -> WhatSaved | None:
        """What the server's tabs saved as its stop begins (dry run: would save); None: not known."""
        ask = getattr(self.kernels, "ask_to_save", None)
        if ask is None or reclaim.address is None or self.save_wait <= 0:
            return None
        return await ask(reclaim.session.user, reclaim.session.server, *reclaim.address, dry_run=dry_run,
                         wait=self.save_wait)

    async def _would_save(self, reclaim: Reclaim) -> None:
        """Dry run: the decisions log keeps what the tabs would have saved (nothing is saved)."""
        saved = await self._save_first(reclaim, True)
        if saved is not None:
            d = reclaim.decision
            log.info("[dry run] %s: its %d tab(s) would have saved %d document(s)", d.session, saved.tabs,
                     len(saved.documents) + saved.more)
            self.store.record_decisions([dataclasses.replace(d, would_save=saved)], self.clock())

    async def _stop_all(self, begun: list[tuple[Reclaim, int]], user: HubServer | None) -> None:
        results = await asyncio.gather(*(self._stop_one(r, rid) for r, rid in begun))
        if user is not None and all(r.ok for r in results):
            now = self.clock()
            delete, why = decide_user(admin=user.admin, created=user.user_created,
                                      last_activity=user.user_last_activity, now=now, config=self.policy)
            if delete:
                log.info("culling user %s (%s)", user.user, why)
                if (await self.stopper.delete_user(user.user)).ok:
                    self.metrics.users_deleted.inc()

    async def _stop_one(self, reclaim: Reclaim, rid: int) -> StopResult:
        session, d = reclaim.session, reclaim.decision
        log.info("reclaim %s (%s): %s", server_name(session.id), d.rule, d.reason)
        saved = await self._save_first(reclaim, False)
        if saved is not None:
            self.store.record_saved(rid, saved)
        result = await self.stopper.stop(session.user, session.server)
        self._finish(rid, session.id, d.rule, session.gpus, result)
        if result.ok and session.gpus:
            await self._notify(d, session, self.clock())
        return result

    def _finish(self, rid: int, sid: str, rule: str, gpus: int, result: StopResult) -> None:
        now = self.clock()
        self.store.finish_reclaim(rid, now, result.outcome, result.detail)
        self.metrics.reclaims.labels(rule, result.outcome).inc()
        if result.ok:
            self.metrics.reclaimed_gpus.inc(gpus)
            self._stopped(sid, now)
        self.metrics.stuck_stops.set(len(self.store.stuck_reclaims()))

    def _stopped(self, sid: str, now: dt.datetime) -> None:
        self.store.session_stopped(sid, now)
        self.store.close_episode(sid, t=now)
        self._forget(sid)

    async def cull_inactive_users(self, users: list[dict], now: dt.datetime) -> list[str]:
        """--cull-users for users with no running server (the hub's models of them), as
        idle-culler does each cycle. Returns the users deleted."""
        deleted = []
        for user in users:
            if f"user:{user['name']}" in self.tasks:
                continue
            try:  # a user model that cannot be read is never a reason to delete its user
                admin, created, last_activity = (entry_field(user, "admin", bool, False), entry_time(user, "created"),
                                                 entry_time(user, "last_activity"))
            except ValueError as e:
                log.warning("not culling user %s: the hub's model of the user: %s", user["name"], e)
                continue
            delete, why = decide_user(admin=admin, created=created, last_activity=last_activity, now=now,
                                      config=self.policy)
            if delete:
                log.info("culling user %s (%s)", user["name"], why)
                if (await self.stopper.delete_user(user["name"])).ok:
                    deleted.append(user["name"])
                    self.metrics.users_deleted.inc()
        return deleted

    # ---- asked for (the web pages)

    def stop_now(self, user: str, server: str, *, by: str, gpus: int, rule: str = "admin",
                 record: bool = True) -> bool:
        """Stop a server at once: an admin's "reclaim now" (recorded as a reclaim of `rule`) or
        a user's own "stop now" (record=False). False when a stop of it is already under way."""
        sid = f"{user}/{server}"
        if sid in self.tasks:
            return False
        rid = None
        if record:
            now = self.clock()
            rid = self.store.begin_reclaim(sid, rule, now, Recorded(Measured(), by=by).shown(), gpus, episode=f"{rule}@{format_time(now)}")
            if rid is None:
                return False

        async def stop() -> None:
            log.info("stop %s now, asked by %s", server_name(sid), by)
            result = await self.stopper.stop(user, server)
            if rid is not None:
                self._finish(rid, sid, rule, gpus, result)
            elif result.ok:
                self._stopped(sid, self.clock())

        self._track(asyncio.create_task(stop(), name=f"stop {sid} ({by})"), [sid])
        return True

    def retry_stuck(self, sid: str) -> bool:
        """Retry the stuck stop of ``sid`` now (the cycle retries them too). False when none."""
        if sid in self.tasks or not any(r.session == sid for r in self.store.stuck_reclaims()):
            return False
        self.retry_unfinished()
        return True

    # ---- stuck and unfinished

    def retry_unfinished(self) -> None:
        """Stops left stuck, or unfinished by a service that died: stop them again (a
        stopped server answers at once)."""
        for record in self.store.stuck_reclaims() + self.store.unfinished_reclaims():
            if record.session in self.tasks:
                continue
            user, _, server = record.session.partition("/")
            log.info("retrying the %s stop of %s begun %s", record.outcome or "unfinished",
                     record.session, format_time(record.t))

            async def again(record=record, user=user, server=server) -> None:
                result = await self.stopper.stop(user, server)
                self._finish(record.id, record.session, record.rule, record.gpus, result)

            self._track(asyncio.create_task(again(), name=f"retry stop {record.session}"), [record.session])
