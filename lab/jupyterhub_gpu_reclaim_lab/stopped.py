"""After a reclaim: the server tells its JupyterLab tabs why it stops, what is kept and lost,
what was saved, and where to start again, so that their user reads it instead of
JupyterLab's bare "Server unavailable".

On SIGTERM jupyter-server stops taking new connections and calls its extensions' stop hooks
while the connections it has stay open: every tab's event bus WebSocket among them. Then this
extension asks the service (the server's own token, as `status` does) for the user's
reclaims: one of this server that is under way is this stop (a policy's reclaim, or an
admin's *Reclaim now*, also over a keep-alive; a stop the user or the hub asked for is no
reclaim and JupyterLab's own dialog says enough). The words are the service's, the one home
of the reason's sentence (this package imports nothing of the hub's); *Start again* is the
service's link to the hub's spawn page (on the hub's host, `$JUPYTERHUB_HOST`, where
servers have subdomains). The tabs get them as a jupyter-server event (`SCHEMA_ID`)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from jupyter_server.extension.application import ExtensionApp

log = logging.getLogger("jupyterhub_gpu_reclaim_lab")

SCHEMA_ID = "https://jupyterhub-gpu-reclaim.org/events/stopped"
SCHEMA = {
    "$id": SCHEMA_ID,
    "version": "1",
    "title": "The GPU reclaim stops the server",
    "description": "Why the server stops, what is kept and lost, what was saved, where to start again.",
    "type": "object",
    "properties": {
        "why": {"type": "string", "title": "the reason, in the service's words, its times in UTC"},
        "why_parts": {
            "type": "array", "title": "the reason as words and times, for the tab to write the times in its zone",
            "items": {"type": "object", "properties": {
                "text": {"type": "string"}, "time": {"type": "string"},
                "title": {"type": "string"}, "relative": {"type": "string"}}},
        },
        "kept": {"type": "string", "title": "what a stop keeps"},
        "lost": {"type": "string", "title": "what a stop loses"},
        "saved": {"type": "array", "items": {"type": "string"}, "title": "the documents saved before the stop"},
        "again": {"type": "string", "title": "Start again: the hub's spawn page"},
    },
    "required": ["why", "again"],
}
#: where the web app's settings keep what the stop hook needs (handlers.setup_handlers)
NOTICE = "gpu_reclaim_stop_notice"
#: the service's words are its own, but a tab shows them: bounded
MAX_TEXT = 1000
#: a reason's parts (words and times: the service's `Sentence.parts_json`), and the fields of each
MAX_PARTS = 20
PART_FIELDS = ("text", "time", "title", "relative")
#: seconds the WebSocket writes get before the server shuts its kernels down and exits
FLUSH = 0.5
#: the longest the stop waits for the service: the kernels' window (window.py) keeps its
#: last MARGIN (5 s) for the server's own exit, this included
ASK_TIMEOUT = 2.0


def hub_page(path: Any, host: str) -> str | None:
    """`path` (the service's link, a path on the hub: `/hub/spawn/alice`) on the hub's host;
    None for anything else."""
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//") or len(path) > MAX_TEXT:
        return None
    return host.rstrip("/") + path


def why_parts(parts: Any) -> list[dict[str, str]]:
    """The reason's parts as the service sent them, its text fields only and bounded; none
    (the tab shows `why`) where they are not a list of such (an older service)."""
    if not isinstance(parts, list) or len(parts) > MAX_PARTS or not all(isinstance(p, dict) for p in parts):
        return []
    return [{k: p[k][:MAX_TEXT] for k in PART_FIELDS if isinstance(p.get(k), str)} for p in parts]


def notice(answer: dict[str, Any], session: str, saved: list[str], host: str,
           base_url: str = "/") -> dict[str, Any] | None:
    """The event for the tabs from the service's answer to `api/sessions`: the reclaim of
    `session` under way; None when there is none (this stop is no reclaim). Without a
    Start again from the service (an older one), the hub's home page under `base_url`."""
    reclaims = answer.get("reclaims")
    record = next((r for r in reclaims if isinstance(r, dict) and r.get("session") == session
                   and r.get("outcome") is None), None) if isinstance(reclaims, list) else None
    if record is None or not isinstance(record.get("why"), str):
        return None
    again = hub_page(record.get("again"), host) or hub_page(f"/{base_url.strip('/')}/".replace("//", "/") + "hub/home", host)
    text = {k: record[k][:MAX_TEXT] if isinstance(record.get(k), str) else "" for k in ("why", "kept", "lost")}
    return {**text, "why_parts": why_parts(record.get("why_parts")), "saved": saved, "again": again}


class StopNotice:
    """What the stop hook asks and tells: the service's client, the tabs' event bus and the
    documents they saved (saving.SaveRounds)."""

    def __init__(self, client: Any, rounds: Any) -> None:
        self.client, self.rounds = client, rounds

    async def tell(self) -> bool:
        """Tell the tabs why the server stops, if it is a reclaim; whether they were told."""
        if not self.client.configured or not self.rounds.tabs(SCHEMA_ID):
            return False
        status, answer = await self.client.request("GET", "api/sessions", timeout=ASK_TIMEOUT)
        saved = [d["path"] for d in self.rounds.shown(False) if d["outcome"] == "saved"]
        event = notice(answer, self.client.session, saved, os.environ.get("JUPYTERHUB_HOST", ""),
                       os.environ.get("JUPYTERHUB_BASE_URL", "/")) if status == 200 else None
        if event is None:
            return False
        self.rounds.events.emit(schema_id=SCHEMA_ID, data=event)
        log.info("GPU reclaim: told %d tab(s) why the server stops", self.rounds.tabs(SCHEMA_ID))
        await asyncio.sleep(FLUSH)
        return True


class StopNoticeApp(ExtensionApp):
    """The stop hook (jupyter-server calls the stop hooks of extension apps only)."""

    name = "jupyterhub_gpu_reclaim_lab_stopped"
    load_other_extensions = True

    async def stop_extension(self) -> None:
        assert self.serverapp is not None
        told = self.serverapp.web_app.settings.get(NOTICE)
        if told is not None:
            try:
                await told.tell()
            except Exception:  # the stop goes on whatever happens here
                log.exception("GPU reclaim: telling the tabs why the server stops")
