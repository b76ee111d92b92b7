"""The single-user server's `gpu-reclaim/…` handlers and their calls to the reclaim service.

The browser talks only to its own server (the hub's login, the server's XSRF check); the
server asks the service with $JUPYTERHUB_API_TOKEN, whose scopes must include
`access:services!service=gpu-reclaim` (`c.Spawner.server_token_scopes`, docs/lab.md). The
service then sees the server's user and lets it act on that user's sessions only. The hub
records no user activity for a server's token, and these handlers are not the server's
activity (jupyter-server's last_activity, which jupyterhub-singleuser reports to the hub).
The proxy in front of the server, though, counts every successful request it passes as the
hub's last_activity of the server, whatever the handler (configurable-http-proxy): so the
frontend polls only while its tab is shown, when JupyterLab's own polls of kernels and
sessions count as much, and a tab in the background polls nothing (docs/lab.md).

Where the service is not configured, not reachable or refuses the token, `status` answers
{"available": false} and the frontend shows nothing. `save` (the service, as it stops the
server) and `saved` (the tabs' reports) are the save before the stop: saving.py."""

from __future__ import annotations

import json
import logging
import os
from typing import Any
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Float, Unicode
from traitlets.config import Configurable

from .saving import MAX_WAIT, SCHEMA, SaveRounds, Watcher, read_report
from .stopped import MAX_TEXT, NOTICE, SCHEMA as STOPPED_SCHEMA, StopNotice, why_parts


log = logging.getLogger("jupyterhub_gpu_reclaim_lab")

#: the service's URL as the single-user servers reach it (the spawner's environment)
URL_ENV = "JUPYTERHUB_GPU_RECLAIM_URL"
#: the session fields the frontend reads (the service's API has more)
SESSION_FIELDS = ("state", "gpus", "reclaim_at", "warned_at", "intent_until", "exempt_until", "idle_threshold")
#: where the web app's settings keep the save watch until the server's loop runs (__init__.py)
WATCHER = "gpu_reclaim_save_watcher"
#: states in which the GPU is idle and `idle_since` means something
IDLE_STATES = ("idle", "warned")


class GpuReclaimLab(Configurable):
    service_url = Unicode(
        config=True,
        help=f"""The reclaim service's URL as this server reaches it, e.g.
        http://hub:10101/services/gpu-reclaim/ (default: ${URL_ENV}; none: the extension
        shows nothing).""")
    timeout = Float(5, config=True, help="Seconds to wait for the reclaim service's answer.")
    save_lead = Float(
        120, config=True,
        help="""Seconds before the reclaim time at which the open JupyterLab tabs save their
        documents with unsaved changes (saving.py; they save again when the stop starts).
        0: only when the stop starts.""")
    watch_interval = Float(
        30, config=True,
        help="""Seconds between two reads of the reclaim time from the service (server to
        service: not the user's activity), so that the tabs save `save_lead` before it.""")

    def _service_url_default(self) -> str:
        return os.environ.get(URL_ENV, "")


class ServiceClient:
    """The reclaim service's user API, called as this server's user with its token."""

    def __init__(self, settings: GpuReclaimLab) -> None:
        self.url = settings.service_url.rstrip("/") + "/" if settings.service_url else ""
        self.timeout = settings.timeout
        self.token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.session = f"{os.environ.get('JUPYTERHUB_USER', '')}/{os.environ.get('JUPYTERHUB_SERVER_NAME', '')}"
        self._failing = False

    @property
    def configured(self) -> bool:
        return bool(self.url and self.token and not self.session.startswith("/"))

    def session_path(self, action: str) -> str:
        user, _, server = self.session.partition("/")
        return f"api/sessions/{quote(user, safe='')}/{quote(server, safe='')}/{action}"

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      timeout: float | None = None) -> tuple[int, dict]:
        """(status, JSON answer); (0, {}) when the service cannot be reached in `timeout` s
        (default: the configured one)."""
        try:
            response = await AsyncHTTPClient().fetch(
                self.url + path, method=method, raise_error=False,
                request_timeout=self.timeout if timeout is None else min(timeout, self.timeout),
                headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
                body=json.dumps(body) if body is not None else ("" if method in ("POST", "PUT") else None))
        except (OSError, HTTPClientError) as e:
            self._note_failure(f"not reachable: {e}")
            return 0, {}
        try:
            answer = json.loads(response.body or b"{}")
        except ValueError:
            answer = {}
        if response.code >= 400 and response.code not in (400, 404, 409, 429):
            self._note_failure(f"{method} {path}: {response.code} {answer.get('message', '')}")
        elif response.code < 400:
            self._failing = False
        return response.code, answer if isinstance(answer, dict) else {}

    def _note_failure(self, what: str) -> None:
        # one warning per outage, not one per poll
        (log.debug if self._failing else log.warning)("GPU reclaim service %s", what)
        self._failing = True


class Handler(APIHandler):
    #: a poll of the state is not the server's activity (jupyter-server's last_activity, which
    #: jupyterhub-singleuser reports to the hub; the proxy's count: the module's docstring)
    _track_activity = False

    def initialize(self, client: ServiceClient) -> None:
        self.client = client

    def unavailable(self) -> None:
        self.set_status(503)
        self.finish({"message": "the GPU reclaim service is not available"})

    def forward(self, status: int, answer: dict) -> None:
        self.set_status(status)
        self.finish(answer if status < 400 else {"message": answer.get("message", "")})

    def json_object(self) -> dict:
        """The request's body, a JSON object (none: {}); anything else is the caller's 400."""
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        return body


def _text(value: object) -> str:
    """A few words of the service's for the item, as a string of at most MAX_TEXT ("" for
    anything else: what the tab writes is text, whatever a service answers)."""
    return value[:MAX_TEXT] if isinstance(value, str) else ""


class StatusHandler(Handler):
    @web.authenticated
    async def get(self) -> None:
        if not self.client.configured:
            self.finish({"available": False})
            return
        status, answer = await self.client.request("GET", "api/sessions")
        if status != 200:
            self.finish({"available": False})
            return
        own = next((s for s in answer.get("sessions") or [] if s.get("session") == self.client.session), None)
        session = None
        if own is not None:
            session = {k: own.get(k) for k in SESSION_FIELDS}
            session["util"] = _text(own.get("util_text"))
            session["gpus_text"] = _text(own.get("gpus_text"))  # "1 MIG slice" ("": an older service)
            session["idle_since"] = own.get("idle_since") if own.get("state") in IDLE_STATES else None
            # why it is warned, the service's sentence, its times for the tab to write in its zone
            why = own.get("why")
            session["why"] = why[:MAX_TEXT] if isinstance(why, str) else None
            session["why_parts"] = why_parts(own.get("why_parts"))
            session.update(sparkline(own))
        # the words come from the service, their one home, whatever version it runs
        self.finish({"available": True, "session": session, "keeps": answer.get("keeps") or "",
                     "loses": answer.get("loses") or "",
                     "max_keepalive_seconds": answer.get("max_keepalive_seconds")})


def sparkline(own: dict) -> dict[str, Any]:
    """The session's utilization over the service's sparkline window, as the user page draws
    it: `spark` (percent per slice, oldest first, null: no data) and its words, `spark_label`
    (none: the service gave no series, as an older service would)."""
    values, label = own.get("spark"), own.get("spark_label")
    if not isinstance(values, list) or not isinstance(label, str):
        return {"spark": [], "spark_label": ""}
    return {"spark": [v if isinstance(v, (int, float)) else None for v in values], "spark_label": label}


class KeepAliveHandler(Handler):
    """{"hours": N} or {"until": ISO time}: the service checks the values (and the cap)."""

    @web.authenticated
    async def post(self) -> None:
        body = self.json_object()
        body = {k: body[k] for k in ("hours", "until") if k in body}  # nothing else reaches the service
        if not self.client.configured:
            self.unavailable()
            return
        status, answer = await self.client.request("PUT", self.client.session_path("intent"), body)
        if not status:
            self.unavailable()
            return
        self.forward(status, answer)


class StopHandler(Handler):
    @web.authenticated
    async def post(self) -> None:
        if not self.client.configured:
            self.unavailable()
            return
        status, answer = await self.client.request("POST", self.client.session_path("stop"))
        if not status:
            self.unavailable()
            return
        self.forward(status, answer)


class SaveHandler(Handler):
    """The service, as it stops this server (with the probe's token, owned by this server's
    user and good for this server only): the tabs save now, or in dry run say what they
    would save; the answer is what they saved since the server started, and when.
    {"dry_run": bool, "wait": seconds (at most MAX_WAIT)}."""

    def initialize(self, client: ServiceClient, rounds: SaveRounds) -> None:  # type: ignore[override]
        super().initialize(client)
        self.rounds = rounds

    @web.authenticated
    async def post(self) -> None:
        body = self.json_object()
        dry_run, wait = body.get("dry_run", False), body.get("wait", 10)
        if not isinstance(dry_run, bool) or not isinstance(wait, (int, float)) or isinstance(wait, bool) \
                or not 0 <= wait <= MAX_WAIT:
            raise web.HTTPError(400, f"dry_run must be a boolean, wait a number of seconds up to {MAX_WAIT:g}")
        tabs = await self.rounds.ask("list" if dry_run else "save", "stop", float(wait))
        self.finish({"tabs": tabs, "documents": self.rounds.shown(dry_run)})


class SavedHandler(Handler):
    """A tab's report of a round: {"round", "tab", "documents": [{"path", "outcome", "message"}], "done"}."""

    def initialize(self, client: ServiceClient, rounds: SaveRounds) -> None:  # type: ignore[override]
        super().initialize(client)
        self.rounds = rounds

    @web.authenticated
    async def post(self) -> None:
        rid, tab, documents, done = read_report(self.request.body)
        try:
            self.rounds.report(rid, tab, documents, done)
        except KeyError:
            raise web.HTTPError(409, "that round is over") from None
        self.set_status(204)
        self.finish()


def setup_handlers(serverapp: Any) -> None:
    settings = GpuReclaimLab(config=serverapp.config)
    client = ServiceClient(settings)
    serverapp.event_logger.register_event_schema(SCHEMA)
    serverapp.event_logger.register_event_schema(STOPPED_SCHEMA)
    rounds = SaveRounds(serverapp.event_logger)
    base = serverapp.web_app.settings["base_url"].rstrip("/") + "/gpu-reclaim/"
    serverapp.web_app.add_handlers(".*$", [
        (base + "status", StatusHandler, {"client": client}),
        (base + "keep-alive", KeepAliveHandler, {"client": client}),
        (base + "stop", StopHandler, {"client": client}),
        (base + "save", SaveHandler, {"client": client, "rounds": rounds}),
        (base + "saved", SavedHandler, {"client": client, "rounds": rounds}),
    ])
    serverapp.web_app.settings[WATCHER] = Watcher(client, rounds, settings.save_lead, settings.watch_interval)
    serverapp.web_app.settings[NOTICE] = StopNotice(client, rounds)
    if not client.configured:
        log.info("GPU reclaim: $%s or the server's token is not set; the JupyterLab extension shows nothing",
                 URL_ENV)
