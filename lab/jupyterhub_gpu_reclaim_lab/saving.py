"""Save before the stop: the open JupyterLab tabs save their documents with unsaved changes
a lead before the reclaim and again when the stop starts.

Only the browser holds unsaved edits, and a tab in the background must not ask the server
anything (every request the proxy passes is the hub's `last_activity` of the server:
handlers.py). So the server tells the tabs, and they answer only when there is work:

* The server learns the reclaim time from the service (its own token, server to service:
  no user activity) every `GpuReclaimLab.watch_interval`, and `GpuReclaimLab.save_lead`
  before it, it asks its tabs to save (`_watch`).
* When the service stops the server it first asks the server (`POST gpu-reclaim/save`, with
  the probe's token, at the server's own address), which asks its tabs again and answers
  what was saved, and when: the service records it with the reclaim. In dry run the tabs
  only say what they would save.

The ask is a jupyter-server event (`SCHEMA_ID`) on the event bus, which every JupyterLab tab
keeps open as a WebSocket (`app.serviceManager.events`), shown or hidden: what the server
writes to it is not activity (configurable-http-proxy counts what the browser sends, and
the answer of a request, not what a server pushes on a WebSocket). A tab saves its dirty
documents with the document's own save (no rename dialog for an untitled one: that is the
save command's, not the document's), except one that is read-only or changed on disk since
it was opened (named, not overwritten); it reports each document to `gpu-reclaim/saved`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from tornado import web

log = logging.getLogger("jupyterhub_gpu_reclaim_lab")

SCHEMA_ID = "https://jupyterhub-gpu-reclaim.org/events/save-before-stop"
SCHEMA = {
    "$id": SCHEMA_ID,
    "version": "1",
    "title": "Save before the GPU reclaim stops the server",
    "description": "The server asks its JupyterLab tabs to save (or, in dry run, to list) their "
                   "documents with unsaved changes, and to report each to gpu-reclaim/saved.",
    "type": "object",
    "properties": {
        "action": {"enum": ["save", "list"], "title": "save, or list only (dry run)"},
        "round": {"type": "string", "title": "the round the reports name"},
        "reason": {"enum": ["lead", "stop"], "title": "before the reclaim time, or as the stop starts"},
        "reclaim_at": {"type": ["string", "null"], "title": "the reclaim time, if known"},
    },
    "required": ["action", "round", "reason"],
}

#: what a tab reports of a document ("saving": begun, not yet done); the hub-side package reads
#: them (observations.SAVE_OUTCOMES, with "would-save" for a dry run's list): this package
#: imports nothing of it
OUTCOMES = ("saving", "saved", "would-save", "read-only", "conflict", "failed")
#: what one server keeps of its saves: its user chooses how many documents and their names
#: (the path as long as the hub-side record keeps, observations.MAX_PATH)
MAX_DOCUMENTS = 100
MAX_PATH = 1024
MAX_MESSAGE = 200
#: the longest the service may ask a stop's save to wait (settings.SAVE_WAIT_MAX)
MAX_WAIT = 120.0


@dataclass(frozen=True)
class Saved:
    """One document a tab saved (or could not, or would in dry run), and when."""

    path: str
    outcome: str
    at: str  # ISO UTC, the server's clock
    reason: str  # "lead" or "stop"
    message: str = ""


class SaveRounds:
    """The server's asks to its tabs and what they answered, since it started."""

    def __init__(self, event_logger: Any) -> None:
        self.events = event_logger
        self.saved: dict[str, Saved] = {}  # path → its latest report
        # round id → (action, reason, tabs asked, tabs done, all done)
        self._rounds: dict[str, tuple[str, str, int, set[str], asyncio.Event]] = {}
        self.would: dict[str, Saved] = {}  # dry run: the last listing

    def tabs(self, schema_id: str = SCHEMA_ID) -> int:
        """The tabs listening on the event bus for `schema_id` (each JupyterLab tab keeps one
        WebSocket, listening for every schema registered before it opened)."""
        listeners = getattr(self.events, "_modified_listeners", {})  # jupyter_events keeps them by schema
        return len(listeners.get(schema_id, ()))

    async def ask(self, action: str, reason: str, wait: float, reclaim_at: str | None = None) -> int:
        """Ask the tabs to save (or list) and wait until each has answered, at most `wait` s;
        how many tabs were asked."""
        tabs = self.tabs()
        if not tabs:
            return 0
        rid = uuid.uuid4().hex
        done = asyncio.Event()
        self._rounds[rid] = (action, reason, tabs, set(), done)
        if action == "list":
            self.would.clear()
        try:
            self.events.emit(schema_id=SCHEMA_ID,
                             data={"action": action, "round": rid, "reason": reason, "reclaim_at": reclaim_at})
            await asyncio.wait_for(done.wait(), wait)
        except asyncio.TimeoutError:
            pass
        finally:
            answered = len(self._rounds.pop(rid)[3])
        log.info("GPU reclaim: asked %d tab(s) to %s (%s); %d answered", tabs, action, reason, answered)
        return tabs

    def report(self, rid: str, tab: str, documents: list[dict[str, Any]], done: bool) -> None:
        """A tab's report for round `rid`; KeyError for a round that is over or unknown."""
        action, reason, asked, finished, all_done = self._rounds[rid]
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        for doc in documents:
            kept = self.would if action == "list" else self.saved
            if doc["path"] in kept or len(kept) < MAX_DOCUMENTS:
                kept[doc["path"]] = Saved(doc["path"], "would-save" if action == "list" else doc["outcome"], now,
                                          reason, doc["message"])
        if done:
            finished.add(tab)
            if len(finished) >= asked:
                all_done.set()

    def shown(self, dry_run: bool) -> list[dict[str, Any]]:
        return [asdict(s) for s in (self.would if dry_run else self.saved).values()]


def read_report(body: bytes) -> tuple[str, str, list[dict[str, Any]], bool]:
    """(round, tab, documents, done) of a tab's report; HTTPError 400 saying what is wrong."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise web.HTTPError(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise web.HTTPError(400, "the body must be a JSON object")
    rid, tab, documents, done = data.get("round"), data.get("tab"), data.get("documents", []), data.get("done", False)
    if not (isinstance(rid, str) and isinstance(tab, str) and 0 < len(tab) <= 64):
        raise web.HTTPError(400, "round and tab must be strings")
    if not isinstance(documents, list) or len(documents) > MAX_DOCUMENTS or not isinstance(done, bool):
        raise web.HTTPError(400, f"documents must be a list of at most {MAX_DOCUMENTS}, done a boolean")
    out = []
    for doc in documents:
        path, outcome, message = (doc.get(k) for k in ("path", "outcome", "message")) if isinstance(doc, dict) else (
            None, None, None)
        if not (isinstance(path, str) and 0 < len(path) <= MAX_PATH and outcome in OUTCOMES):
            raise web.HTTPError(400, f"each document needs a path (at most {MAX_PATH} characters) and an outcome "
                                     f"({', '.join(OUTCOMES)})")
        out.append({"path": path, "outcome": outcome,
                    "message": message[:MAX_MESSAGE] if isinstance(message, str) else ""})
    return rid, tab, out, done


class Watcher:
    """Asks the tabs to save `save_lead` seconds before the reclaim time the service gives
    this server, once per reclaim time."""

    def __init__(self, client: Any, rounds: SaveRounds, lead: float, interval: float) -> None:
        self.client, self.rounds, self.lead, self.interval = client, rounds, lead, interval
        self._saved_for: str | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """In the server's running loop (the extension's start hook)."""
        if self.client.configured and self.lead > 0:
            self._task = asyncio.create_task(self._watch(), name="gpu-reclaim save watch")

    async def _watch(self) -> None:
        while True:
            try:
                pause = await self.tick()
            except Exception:  # never let the watch die: the next tick tries again
                log.exception("GPU reclaim: reading the reclaim time")
                pause = self.interval
            await asyncio.sleep(pause)

    async def tick(self) -> float:
        """One look at the session; the seconds until the next."""
        status, answer = await self.client.request("GET", "api/sessions")
        own = next((s for s in answer.get("sessions") or [] if s.get("session") == self.client.session),
                   None) if status == 200 else None
        reclaim_at = own.get("reclaim_at") if own and own.get("state") == "warned" else None
        if not isinstance(reclaim_at, str):
            return self.interval
        try:
            due = dt.datetime.fromisoformat(reclaim_at.replace("Z", "+00:00")).timestamp() - self.lead
        except ValueError:
            return self.interval
        if time.time() < due:
            return max(1.0, min(self.interval, due - time.time()))
        if reclaim_at != self._saved_for:
            self._saved_for = reclaim_at
            await self.rounds.ask("save", "lead", wait=max(1.0, self.lead / 2), reclaim_at=reclaim_at)
        return self.interval
