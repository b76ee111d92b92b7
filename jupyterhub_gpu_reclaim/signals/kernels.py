"""The kernel signal: a server's kernels and terminals, read without counting as activity.

`GET <base><server.url>api/kernels?no_track_activity=1` and `.../api/terminals?no_track_activity=1`
(what the policy reads), and `.../api/sessions?no_track_activity=1` (which documents those kernels
run: what a reclaim record keeps, `WhatRan`; a server that does not answer it only leaves that
unknown), with a token owned by the server's user and good for that server only (probe_token_client.py),
never the service's own: the user controls the server and can record every request to it.
No cookie is ever sent and no redirect followed (a server could send the probe elsewhere).
`no_track_activity=1` keeps the single-user server from reporting the probe as activity
to the hub.

Where the probe goes matters: configurable-http-proxy records activity for every request
it proxies that is answered below 300, whatever the query string, and for every request
body whatever the answer (an anonymous POST the server refuses counts:
docs/security.md, "`last_activity` is not a person"); the hub copies the proxy's route
activity into the server's `last_activity` every `last_activity_interval`. So a probe
through the public proxy URL does move `last_activity` (tests/signals/test_signals_live.py
shows it); give `direct_url` — the server's own address, `http://{podIP}:{notebook-port}`,
what KubeSpawner itself uses and the pods signal knows — to leave it untouched.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import aiohttp

from ..policy.observations import MAX_PATH, MAX_RAN, SAVE_OUTCOMES, SAVE_REASONS, Kernel, Ran, SavedDoc, WhatRan, WhatSaved
from ..oneline import brief
from .http_source import MAX_BODY, HttpSource, SignalError, entry_field, entry_time, get_json, read_capped
from .probe_token_client import NoProbeCredential, ProbeCredentials

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.kernels")

NO_TRACK = {"no_track_activity": "1"}
T = TypeVar("T")


def kernels_from_model(model: Any) -> list[Kernel]:
    """The kernels of `/api/kernels`. The user controls this answer: any malformed kernel
    makes the whole answer unusable (SignalError), so the session's kernels are unknown
    and the policy holds its reclaim (kernel-data-missing)."""
    return _each(model, "/api/kernels", lambda k: Kernel(
        execution_state=_required(entry_field(k, "execution_state", str, max_length=64), "execution_state"),
        last_activity=entry_time(k, "last_activity")))


def terminals_from_model(model: Any) -> list[dt.datetime | None]:
    """last_activity of each terminal of `/api/terminals`; SignalError as above."""
    return _each(model, "/api/terminals", lambda t: entry_time(t, "last_activity"))


def ran_from_models(sessions: Any, terminals: Any) -> WhatRan | None:
    """What ran, from `/api/sessions` (the documents with a kernel) and `/api/terminals`;
    None when the sessions' answer is not a list. The user controls both: an entry that
    cannot be read is left out and counted (`WhatRan.more`), never trusted."""
    if not isinstance(sessions, list):
        return None
    entries: list[Ran] = []
    unreadable = 0
    for model, read in ((sessions, _document), (terminals if isinstance(terminals, list) else [], _terminal)):
        for entry in model:
            try:
                entries.append(read(entry))
            except ValueError:
                unreadable += 1
    return WhatRan.of(entries, unreadable)


def _document(model: Any) -> Ran:
    return Ran(kind=entry_field(model, "type", str, "notebook", max_length=32),
               path=_required(entry_field(model, "path", str, max_length=MAX_PATH), "path"),
               last_activity=entry_time(entry_field(model, "kernel", dict, {}), "last_activity"))


def _terminal(model: Any) -> Ran:
    return Ran("terminal", _required(entry_field(model, "name", str, max_length=MAX_PATH), "name"),
               entry_time(model, "last_activity"))


def saved_from_model(model: Any) -> WhatSaved | None:
    """What the server's tabs saved, from its `gpu-reclaim/save` answer (the lab package's
    saving.py); None when the answer is not one. The user controls it: a document that
    cannot be read is counted (`more`), never trusted."""
    tabs, documents = (model.get("tabs"), model.get("documents")) if isinstance(model, dict) else (None, None)
    if not isinstance(tabs, int) or isinstance(tabs, bool) or tabs < 0 or not isinstance(documents, list):
        return None
    kept: list[SavedDoc] = []
    for doc in documents:
        try:
            path = _required(entry_field(doc, "path", str, max_length=MAX_PATH), "path")
            outcome, reason = entry_field(doc, "outcome", str), entry_field(doc, "reason", str, "stop")
            if outcome not in SAVE_OUTCOMES or reason not in SAVE_REASONS:
                raise ValueError(f"outcome {brief(outcome)}, reason {brief(reason)}")
            path.encode("utf-8")  # a lone surrogate: no database or page can hold it
            kept.append(SavedDoc(path, outcome, entry_time(doc, "at"), reason))
        except (ValueError, UnicodeEncodeError):
            continue
    return WhatSaved(min(tabs, 10_000), tuple(kept[:MAX_RAN]), len(documents) - min(len(kept), MAX_RAN))


def server_base(direct_url: str, server_url_path: str) -> str:
    """The server's own address with its url path (`/user/alice/`), ending in "/"."""
    path = "/" + server_url_path.strip("/") + "/" if server_url_path.strip("/") else "/"
    return direct_url.rstrip("/") + path


def _required(value: T | None, key: str) -> T:
    if value is None:
        raise ValueError(f"no {key}")
    return value


def _each(model: Any, path: str, read: Callable[[Any], T]) -> list[T]:
    if not isinstance(model, list):
        raise SignalError("kernels", f"{path}: not a list: {brief(model)}")
    try:
        return [read(entry) for entry in model]
    except ValueError as e:
        raise SignalError("kernels", f"{path}: a malformed entry: {e}") from None


@dataclass(frozen=True)
class Probed:
    """One server's answers: its kernels and the last activity of each terminal (what the
    policy reads) and what ran there (None: the server did not say)."""

    kernels: list[Kernel]
    terminals: list[dt.datetime | None]
    ran: WhatRan | None


class KernelSignal(HttpSource):
    """Probes users' servers at their own address (the proxy would move the hub's
    last_activity). `credentials` gives the token for each server; None: no credential, so
    no probe (every probe raises NoProbeCredential without a request)."""

    def __init__(self, credentials: ProbeCredentials | None, timeout: float = 5.0, concurrency: int = 10) -> None:
        self.timeout = timeout
        self.credentials = credentials
        self._semaphore = asyncio.Semaphore(concurrency)

    async def probe(self, user: str, server: str, server_url_path: str, direct_url: str | None
                    ) -> tuple[list[Kernel], list[dt.datetime | None]]:
        """(kernels, last_activity of each terminal) of `user`'s server (`probe_all`)."""
        probed = await self.probe_all(user, server, server_url_path, direct_url)
        return probed.kernels, probed.terminals

    async def probe_all(self, user: str, server: str, server_url_path: str, direct_url: str | None) -> Probed:
        """The answers of `user`'s server `server`, its `url` path (`/user/alice/`) at
        `direct_url` (http://{podIP}:{port}; None: not known, so no probe). A token the
        server refuses (401/403) is replaced once."""
        if self.credentials is None:
            raise NoProbeCredential("kernel probes have no credential (kernel_probe_credential = 'none')")
        if not direct_url:
            raise SignalError("kernels", "the server's own address is not known (its pod has no IP yet)")
        base = server_base(direct_url, server_url_path)
        for attempt in (1, 2):
            # the token first, outside the semaphore: slow servers never delay minting
            token = await self.credentials.token(user, server)
            try:
                async with self._semaphore:
                    kernels, terminals, sessions = await self._get_all(base, token)
                break
            except SignalError as e:
                if e.status not in (401, 403) or attempt == 2:
                    raise
                await self.credentials.rejected(user, server, token)
        return Probed(kernels_from_model(kernels), terminals_from_model(terminals),
                      ran_from_models(sessions, terminals))

    async def _get_all(self, base: str, token: str) -> tuple[Any, Any, Any]:
        """The kernels', terminals' and sessions' answers; a sessions' answer that failed is
        None (what ran is not known; the policy's data is)."""
        headers = {"Authorization": f"token {token}"}
        results = await asyncio.gather(
            self._get(base + "api/kernels", headers), self._terminals(base, headers),
            self._get(base + "api/sessions", headers), return_exceptions=True)
        for result in results[:2]:
            if isinstance(result, BaseException):
                raise result
        sessions = results[2]
        if isinstance(sessions, SignalError):
            log.debug("what runs in %s is not known: %s", base, sessions.message)
            sessions = None
        elif isinstance(sessions, BaseException):
            raise sessions
        return results[0], results[1], sessions

    async def _get(self, url: str, headers: dict[str, str]) -> Any:
        return await get_json(self._client(), url, source="kernels", timeout=self.timeout,
                              headers=headers, params=NO_TRACK, allow_redirects=False)

    async def _terminals(self, base: str, headers: dict[str, str]) -> Any:
        try:
            return await self._get(base + "api/terminals", headers)
        except SignalError as e:
            if e.status == 404:  # terminals disabled on this server: there are none
                return []
            raise

    async def ask_to_save(self, user: str, server: str, server_url_path: str, direct_url: str | None, *,
                          dry_run: bool, wait: float) -> WhatSaved | None:
        """Ask `user`'s server, as its stop begins, to have its JupyterLab tabs save their
        documents with unsaved changes (in dry run: say which they would save), waiting at
        most `wait` s for them; what they saved since it started. None: not known (no
        credential or address, a server without the lab package, no answer in time)."""
        if self.credentials is None or not direct_url:
            return None
        url = server_base(direct_url, server_url_path) + "gpu-reclaim/save"
        try:
            token = await self.credentials.token(user, server)
            async with self._client().post(
                    url, json={"dry_run": dry_run, "wait": wait}, params=NO_TRACK, allow_redirects=False,
                    headers={"Authorization": f"token {token}"},
                    timeout=aiohttp.ClientTimeout(total=wait + self.timeout)) as r:
                body = await read_capped(r.content, r.content_length, MAX_BODY["kernels"])
                if r.status != 200 or body is None:
                    log.info("what the tabs of %s/%s saved is not known: HTTP %s", user, server, r.status)
                    return None
                return saved_from_model(json.loads(body))
        except (SignalError, aiohttp.ClientError, asyncio.TimeoutError, ValueError, RecursionError) as e:
            log.info("what the tabs of %s/%s saved is not known: %s", user, server, brief(str(e)))
            return None

    def release(self, sid: str) -> None:
        """Session `sid` left the ready list: its credential goes too."""
        release = getattr(self.credentials, "release", None)
        if release is not None:
            release(sid)

    async def close(self) -> None:
        close = getattr(self.credentials, "close", None)
        if close is not None:
            await close()
        await super().close()
