"""Stopping servers: only through the hub's REST API, never by deleting pods (a deleted
pod is not a stopped server: the hub keeps it as running and KubeSpawner restarts or
reports it). Then the stop is followed until the hub no longer lists the server and,
when a `pod_gone` check is given, until the pod is gone so its GPUs are really free.

Hub semantics (JupyterHub 5/6 `UserServerAPIHandler.delete`):
- 204: done — the stop finished, or the server was not running at all;
- 202: the stop is pending (also when a stop was already under way);
- 404: no such user, or no such named server (already removed) → "already-stopped";
- 400: "Named servers are not enabled", "Cannot delete the default server" (remove on the
  default server), "Cannot stop a server while it is being renamed" → "failed" (no retry).
  Older hubs answered 400 "... is not running" for a stopped server → "already-stopped".
- 5xx, 429, timeouts and connection errors are retried with exponential backoff.

The retries and the waits for the stop to finish use JupyterHub's `exponential_backoff`
(full jitter, as KubeSpawner waits for its pods), so that many stops retried or followed
at once do not reach the hub in step.

A stop the hub accepted but that does not finish within `stop_timeout` is "stuck": the
caller records it and retries it next cycle (jupyterhub-idle-culler issue #77).
The token is sent in the Authorization header only and never logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import aiohttp
from jupyterhub.utils import exponential_backoff
from yarl import URL

from ..wording import server_name
from ..policy.observations import Outcome
from ..oneline import brief
from ..signals.http_source import HttpSource, SignalError, get_json, hub_message

log = logging.getLogger("jupyterhub_gpu_reclaim.service.hub_stopper")

PodGone = Callable[[str, str], Awaitable[bool]]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class StopResult:
    outcome: Outcome
    attempts: int  # DELETE requests sent
    seconds: float  # from the first DELETE to the result
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("stopped", "already-stopped")


class _Transient(Exception):
    """A DELETE that may succeed when tried again (5xx, 429, timeout, connection)."""


class HubStopper(HttpSource):
    """Stops one user's server through `DELETE {api}/users/{u}/server` (default server) or
    `DELETE {api}/users/{u}/servers/{name}` (named; body `{"remove": true}` when
    `remove_named_servers`). `retries` is the number of retries after the first DELETE
    (so at most `retries + 1` requests), waiting up to `backoff * 2**k` seconds before retry
    k; the stop is then checked again and again, at most `poll_interval` seconds apart,
    until it is done or `stop_timeout` has passed."""

    def __init__(self, api_url: str, token: str, *, remove_named_servers: bool = False,
                 stop_timeout: float = 300.0, poll_interval: float = 1.0, retries: int = 3,
                 backoff: float = 2.0, pod_gone: PodGone | None = None,
                 request_timeout: float = 30.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.remove_named_servers = remove_named_servers
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self.retries = max(0, retries)
        self.backoff = backoff
        self.pod_gone = pod_gone
        self.request_timeout = request_timeout
        self._headers = {"Authorization": f"token {token}"}

    def __repr__(self) -> str:  # no token
        return f"HubStopper({self.api_url!r})"

    # --- URLs -------------------------------------------------------------------
    def _user_url(self, user: str) -> str:
        return f"{self.api_url}/users/{quote(user, safe='')}"

    def _server_url(self, user: str, server: str) -> str:
        if server:
            return f"{self._user_url(user)}/servers/{quote(server, safe='')}"
        return f"{self._user_url(user)}/server"

    # --- the stop ---------------------------------------------------------------
    async def stop(self, user: str, server: str = "") -> StopResult:
        sid = f"{user}/{server}"
        t0 = time.monotonic()

        def result(outcome: Outcome, attempts: int, detail: str) -> StopResult:
            r = StopResult(outcome, attempts, round(time.monotonic() - t0, 3), detail)
            level = logging.INFO if r.ok else logging.WARNING
            log.log(level, "stop %s: %s after %d attempt(s), %.1f s%s", server_name(sid), outcome, attempts,
                    r.seconds, f" ({detail})" if detail else "")
            return r

        status, text, attempts = await self._delete_retrying(
            self._server_url(user, server),
            {"remove": True} if (server and self.remove_named_servers) else None, f"stop {sid}")
        if status is None:
            return result("failed", attempts, f"hub DELETE gave up: {text}")
        if status == 404 or (status == 400 and "not running" in text.lower()):
            return result("already-stopped", attempts, f"hub DELETE: HTTP {status}: {hub_message(text)}")
        if status not in (202, 204):
            return result("failed", attempts, f"hub DELETE: HTTP {status}: {hub_message(text)}")

        log.info("stop %s: hub answered %d; following the stop", server_name(sid), status)
        gone, detail = await self._wait_hub(user, server)
        if not gone:
            return result("stuck", attempts, detail)
        if self.pod_gone is not None:
            freed, detail = await self._wait_pod(user, server)
            if not freed:
                return result("stuck", attempts, detail)
        return result("stopped", attempts, "" if status == 204 else "after pending stop")

    async def delete_user(self, user: str) -> StopResult:
        """`DELETE {api}/users/{u}` (--cull-users), retried like a stop: "stopped" when the
        hub deleted the user, "already-stopped" when it was gone, else "failed"."""
        t0 = time.monotonic()
        status, text, attempts = await self._delete_retrying(self._user_url(user), None,
                                                             f"delete user {user}")
        outcome: Outcome = ("stopped" if status in (200, 202, 204) else
                            "already-stopped" if status == 404 else "failed")
        detail = ("" if outcome == "stopped" else f"hub DELETE user gave up: {text}" if status is None
                  else f"hub DELETE user: HTTP {status}: {hub_message(text)}")
        log.log(logging.INFO if outcome != "failed" else logging.WARNING,
                "delete user %s: %s%s", user, outcome, f" ({detail})" if detail else "")
        return StopResult(outcome, attempts, round(time.monotonic() - t0, 3), detail)

    async def _delete_retrying(self, url: str, body: dict[str, Any] | None,
                               what: str) -> tuple[int | None, str, int]:
        """DELETE with retries: (status, body text, attempts); status None when every
        attempt failed transiently (the text says why)."""
        attempts = 0
        answer: tuple[int | None, str] = (None, "")

        async def attempt() -> bool:  # True: answered, or out of retries
            nonlocal attempts, answer
            attempts += 1
            try:
                answer = await self._request(url, body)
                return True
            except _Transient as e:
                answer = (None, str(e))
                if attempts > self.retries:
                    return True
                log.warning("%s: attempt %d failed (%s); retrying", what, attempts, e)
                return False

        # bounded by the number of attempts; the time limit only backs that up
        limit = (self.retries + 1) * self.request_timeout + self.backoff * 2 ** (self.retries + 1)
        try:
            await exponential_backoff(attempt, f"{what}: no answer", start_wait=self.backoff,
                                      max_wait=self.backoff * 2 ** self.retries, timeout=limit,
                                      timeout_tolerance=0)
        except asyncio.TimeoutError:
            pass
        return answer[0], answer[1], attempts

    async def _request(self, url: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        """One DELETE; raises _Transient for what a retry may cure."""
        try:
            async with self._client().delete(
                    URL(url, encoded=True), data=json.dumps(body) if body is not None else None,
                    headers={"Content-Type": "application/json"} if body is not None else None,
                    timeout=aiohttp.ClientTimeout(total=self.request_timeout)) as r:
                text = await r.text(errors="replace")
                if r.status in RETRY_STATUSES:
                    raise _Transient(f"HTTP {r.status}: {hub_message(text)}")
                return r.status, text
        except asyncio.TimeoutError:
            raise _Transient(f"no answer within {self.request_timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise _Transient(f"{type(e).__name__}: {e}") from None

    async def _poll(self, check: Callable[[], Awaitable[tuple[bool, str]]], failure: str) -> tuple[bool, str]:
        """Call `check` (→ done?, what is still wrong) until it is done or stop_timeout has
        passed, waiting at most poll_interval between two calls."""
        last = ""

        async def done() -> bool:
            nonlocal last
            ok, last = await check()
            return ok

        try:
            await exponential_backoff(done, failure, start_wait=min(0.2, self.poll_interval),
                                      max_wait=self.poll_interval, timeout=self.stop_timeout,
                                      timeout_tolerance=0)
        except asyncio.TimeoutError:
            return False, f"{failure} within {self.stop_timeout:g} s: {last}"
        return True, ""

    async def _wait_hub(self, user: str, server: str) -> tuple[bool, str]:
        """Poll the user model until the server is no longer listed (or marked stopped)."""
        url = self._user_url(user)

        async def stopped() -> tuple[bool, str]:
            try:
                model = await get_json(self._client(), url, source="hub", timeout=self.request_timeout)
            except SignalError as e:
                if e.status == 404:  # the user itself is gone
                    return True, ""
                log.warning("stop %s/%s: polling failed: %s", user, server, e.message)
                return False, f"polling failed: {e.message}"
            servers = (model.get("servers") or {}) if isinstance(model, dict) else None
            spec = servers.get(server) if isinstance(servers, dict) else ()
            if not isinstance(spec, (dict, type(None))):  # never taken for "stopped"
                return False, f"the hub's user model cannot be read: {brief(model)}"
            if spec is None or spec.get("stopped"):
                return True, ""
            return False, f"still listed (pending={spec.get('pending')!r}, ready={spec.get('ready')!r})"

        return await self._poll(stopped, "hub did not finish the stop")

    async def _wait_pod(self, user: str, server: str) -> tuple[bool, str]:
        async def gone() -> tuple[bool, str]:
            try:
                if await self.pod_gone(user, server):  # type: ignore[misc]
                    return True, ""
                return False, "pod still present"
            except Exception as e:  # a failing check is not a freed GPU
                last = f"pod check failed: {type(e).__name__}: {e}"
                log.warning("stop %s/%s: %s", user, server, last)
                return False, last

        return await self._poll(gone, "hub stopped the server but its pod was not gone")
