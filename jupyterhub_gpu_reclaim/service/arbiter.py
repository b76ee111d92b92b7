"""idle-culler 2.0's cull_arbiter_hook, asked about each server without GPUs: `CullArbiter`.

The hook is the admin's code, and may hang or raise anything. Each server's call is its own
task, awaited at most --cull-arbiter-timeout: a hook that does not answer in time, or raises,
holds only its own server (idle-culler 2.0's meaning of a hook that fails: the server is not
culled), never the cycle, the other servers or the pages. A synchronous hook runs in a thread
of its own, off the event loop. That thread cannot be killed: while a server's last call is
still running the hook is not called again for it, so at most one such thread per server
piles up. The threads are daemons: a stuck one never keeps the service from exiting (a
thread pool's, asyncio.to_thread's included, is joined at exit).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import inspect
import logging
import threading
from typing import Any, Callable

from ..wording import server_name
from ..oneline import one_line
from ..policy.observations import Decision
from ..policy.evidence import Measured
from .cycle_types import Observation

log = logging.getLogger("jupyterhub_gpu_reclaim.service")


class CullArbiterError(Exception):
    """The cull_arbiter_hook raised (the cause: what it raised), did not answer in time, or
    is still running."""


class CullArbiter:
    def __init__(self, hook: Callable[..., Any], timeout: float) -> None:
        self.hook, self.timeout = hook, timeout
        # a coroutine function's call is awaited on the loop; anything else runs in a thread
        self.is_async = inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__)
        self._calls: dict[str, asyncio.Task[bool]] = {}  # sid → its last call (done when the hook returned)
        self._logged: dict[str, str] = {}  # sid → the failure last logged for it

    async def arbitrate(self, seen: Observation, now: dt.datetime) -> None:
        """Ask the hook about each server without GPUs not held, as 2.0's handle_server does:
        keyword arguments inactive (since last_activity, else since the start; None without
        either), inactive_limit (the timeout, seconds) and server (the hub's model); its answer
        may be awaitable. The servers are asked together; one whose hook fails is held
        (logged once for each server and failure)."""
        self._calls = {sid: call for sid, call in self._calls.items() if not call.done()}
        self._logged = {sid: what for sid, what in self._logged.items() if sid in seen.sessions}
        asked = [sid for sid, o in seen.sessions.items() if not o.session.gpus and sid not in seen.held]
        answers = await asyncio.gather(*(self._ask(sid, seen, now) for sid in asked))
        for sid, answer in zip(asked, answers, strict=True):
            if isinstance(answer, CullArbiterError):
                seen.held[sid] = self._hold(sid, answer)
            else:
                self._logged.pop(sid, None)
                seen.sessions[sid].cull_arbiter = answer

    def _hold(self, sid: str, error: CullArbiterError) -> Decision:
        what = str(error)
        if self._logged.get(sid) != what:
            self._logged[sid] = what
            log.warning("server %s kept: %s", server_name(sid), what, exc_info=error.__cause__)
        return Decision(sid, "hold", "cull-arbiter-failed",
                        f"{what}; kept, as idle-culler keeps a server its hook fails on",
                        measured=Measured(problem=what))

    async def _ask(self, sid: str, seen: Observation, now: dt.datetime) -> bool | CullArbiterError:
        running = self._calls.get(sid)
        if running is not None:
            return CullArbiterError("the cull_arbiter_hook's call for this server in an earlier cycle "
                                    "is still running; it is not called again until that call returns")
        srv = seen.sessions[sid].server
        since = srv.last_activity or srv.started
        kwargs = {"inactive": now - since if since else None,
                  "inactive_limit": int(seen.sessions[sid].config.cpu_timeout.total_seconds()),
                  "server": srv.model}
        call = self._calls[sid] = asyncio.create_task(self._call(kwargs), name=f"cull_arbiter_hook {sid}")
        call.add_done_callback(_retrieve)
        done, _ = await asyncio.wait({call}, timeout=self.timeout)
        if not done:
            if self.is_async:
                call.cancel()  # a thread cannot be cancelled: its call runs on, and is awaited no more
            return CullArbiterError(f"the cull_arbiter_hook did not answer within {self.timeout:g} s")
        error = call.exception()
        if error is not None:
            assert isinstance(error, CullArbiterError)
            return error
        return call.result()

    async def _call(self, kwargs: dict[str, Any]) -> bool:
        """The hook's answer, whatever it raised (SystemExit included) as a CullArbiterError."""
        try:
            if self.is_async:
                answer = self.hook(**kwargs)
            else:
                answer = await asyncio.wrap_future(_in_thread(self.hook, kwargs))
            if inspect.isawaitable(answer):
                answer = await answer
            elif isinstance(answer, concurrent.futures.Future):
                answer = await asyncio.wrap_future(answer)
            return bool(answer)
        except BaseException as e:  # the admin's code: nothing it raises ends the service
            task = asyncio.current_task()
            if isinstance(e, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # ours: it did not answer in time, or the service is stopping
            raise CullArbiterError(f"the cull_arbiter_hook raised {type(e).__name__}: {one_line(str(e)[:200])}") from e


def _in_thread(hook: Callable[..., Any], kwargs: dict[str, Any]) -> concurrent.futures.Future:
    """`hook(**kwargs)` in a daemon thread of its own."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # never cancelled: the thread would run on all the same

    def run() -> None:
        try:
            future.set_result(hook(**kwargs))
        except BaseException as e:
            future.set_exception(e)

    threading.Thread(target=run, name="cull_arbiter_hook", daemon=True).start()
    return future


def _retrieve(call: asyncio.Task) -> None:
    """A call no longer awaited (it did not answer in time) leaves no "never retrieved" log."""
    if not call.cancelled():
        call.exception()
