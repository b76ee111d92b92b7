"""The hub side of kernel-probe tokens: an API in the hub process that mints only probe
tokens, so that the reclaim service needs no `tokens` scope.

JupyterHub's `POST /hub/api/users/{name}/tokens` checks the new token's scopes against its
*owner's* rights, not the requester's: a service holding `tokens` can mint any user's token
with all that user's rights, a hub admin's included (issue 27). Here the service holds
`custom:gpu-reclaim:probe-tokens` instead, and can mint, for a running server, a token
owned by its user whose one scope is `access:servers!server=USER/NAME` — what a probe needs —
living at most `PROBE_TOKEN_MAX_LIFETIME` (and the hub's `token_expires_in_max_seconds`),
noted `PROBE_NOTE`; list such tokens and delete them. Nothing else: any other scope, a
server not running (pending spawn included), no lifetime or a longer one is a 400, a user
the scope does not cover a 404. A longer lifetime is refused rather than shortened, as the
hub refuses one beyond its own maximum: whoever asks learns the bound (the service's client
reads the hub's message and asks again within it), and a refused request shows in the log.

The routes mirror the hub's own (`{hub}/api/gpu-reclaim/users/{name}/tokens[/{id}]`, the same
bodies and token model), so the service's client differs only in the URL; `GET
{hub}/api/gpu-reclaim/tokens` lists every probe token the scope covers (`{"api_tokens": [...]}`,
each model naming its user), for the service to revoke what an earlier run left. A filter on
the scope (`custom:gpu-reclaim:probe-tokens!group=gpu-users`) limits whose servers it may mint
for, on JupyterHub 5 as on 6. `configure_hub(c)` in jupyterhub_config.py installs them;
JupyterHub registers the handlers through `JupyterHub.extra_handlers` (it logs that the option
is deprecated: no other hook runs code in the hub's API).
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub import orm
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.utils import utcnow
from tornado import web

from ..signals.probe_token_client import PROBE_NOTE, PROBE_TOKEN_MAX_LIFETIME, PROBE_TOKENS_SCOPE, probe_scope

ROUTE = r"/api/gpu-reclaim/users/([^/]+)/tokens"  # under the hub's prefix (/hub/)
LIST_ROUTE = r"/api/gpu-reclaim/tokens"


class _ProbeTokensBase(APIHandler):
    def _check_scope(self) -> None:
        if self.current_user is None or PROBE_TOKENS_SCOPE not in self.parsed_scopes:
            raise web.HTTPError(403, f"kernel-probe tokens need the scope {PROBE_TOKENS_SCOPE}")

    def _covers(self, user: Any) -> bool:
        return bool(self.get_scope_filter(PROBE_TOKENS_SCOPE)(user, kind="user"))


def _is_probe_token(token: Any) -> bool:
    """A token this API minted: its note, and its one scope a probe scope of its owner's. A
    user's own token noted the same (on their token page) is not one: never listed, never
    deleted here, whatever scopes it holds."""
    scopes, user = token.scopes or [], token.user
    return (token.note == PROBE_NOTE and user is not None and len(scopes) == 1
            and isinstance(scopes[0], str) and scopes[0].startswith(probe_scope(user.name, "")))


class ProbeTokensAPIHandler(_ProbeTokensBase):
    """`POST …/users/{name}/tokens` (body as the hub's: `scopes` = [the probe scope of one of
    the user's running servers], `expires_in`, `note` ignored) and `DELETE …/tokens/{id}` of a
    probe token."""

    def _user(self, user_name: str) -> Any:
        self._check_scope()
        user = self.find_user(user_name)
        if user is None or not self._covers(user):
            raise web.HTTPError(404, f"No probe tokens for user {user_name}")
        return user

    async def post(self, user_name: str) -> None:
        user = self._user(user_name)
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Body must be a JSON dict")
        servers = {probe_scope(user.name, name): name for name in user.orm_spawners}
        scopes, expires_in = body.get("scopes"), body.get("expires_in")
        if not (isinstance(scopes, list) and len(scopes) == 1 and isinstance(scopes[0], str)
                and scopes[0] in servers):
            raise web.HTTPError(400, f"a probe token has exactly one scope, access:servers!server="
                                     f"{user.name}/NAME of one of the user's running servers, not {scopes!r}")
        name = servers[scopes[0]]
        spawner = user.spawners[name]
        if not spawner.ready:  # a pending spawn has its server record already, not yet a server
            state = f"pending {spawner.pending}" if spawner.pending else "not running"
            raise web.HTTPError(400, f"server {user.name}/{name} is {state}: a probe token is minted "
                                     f"for a running server only (ask again once it is ready)")
        if not (type(expires_in) is int and expires_in > 0):
            raise web.HTTPError(400, f"a probe token needs expires_in > 0 (seconds), not {expires_in!r}")
        hub_max = self.settings.get("token_expires_in_max_seconds") or 0
        limit = min(PROBE_TOKEN_MAX_LIFETIME, hub_max) if hub_max > 0 else PROBE_TOKEN_MAX_LIFETIME
        if expires_in > limit:  # the hub's own message (the service's client reads it), and why
            raise web.HTTPError(400, f"token expires_in: {expires_in} must not exceed {limit} (kernel-probe "
                                     f"tokens live at most {PROBE_TOKEN_MAX_LIFETIME} s, and at most the hub's "
                                     f"token_expires_in_max_seconds)")
        token = user.new_api_token(note=PROBE_NOTE, expires_in=expires_in, scopes=scopes)
        model = self.token_model(orm.APIToken.find(self.db, token))
        requester = self.current_user
        self.log.info("%s %s minted kernel-probe token %s for %s, expiring in %d s (at %s)",
                      requester.kind.title(), requester.name, model["id"], scopes[0], expires_in,
                      model["expires_at"])
        self.set_status(201)
        self.write(json.dumps({**model, "token": token}))

    def delete(self, user_name: str, token_id: str) -> None:
        user = self._user(user_name)
        prefix, number = token_id[:1], token_id[1:]
        orm_token = (self.db.query(orm.APIToken).filter_by(id=int(number)).first()
                     if prefix == "a" and number.isascii() and number.isdigit() and len(number) < 19 else None)
        if orm_token is None or orm_token.user is not user.orm_user or not _is_probe_token(orm_token):
            raise web.HTTPError(404, f"No such probe token {token_id} for user {user.name}")
        self.db.delete(orm_token)
        self.db.commit()
        self.set_status(204)


class ProbeTokenListAPIHandler(_ProbeTokensBase):
    """`GET …/gpu-reclaim/tokens`: the unexpired probe tokens of every user the scope covers
    (the hub's token models, without the tokens themselves)."""

    def get(self) -> None:
        self._check_scope()
        now = utcnow(with_tz=False)
        tokens = [t for t in self.db.query(orm.APIToken).filter_by(note=PROBE_NOTE)
                  if _is_probe_token(t) and self._covers(t.user) and not (t.expires_at and t.expires_at < now)]
        self.write(json.dumps({"api_tokens": [self.token_model(t) for t in tokens]}))


def configure_hub(c: Any) -> None:
    """In jupyterhub_config.py: declare the scope and install the handlers. Grant the scope
    to the reclaim service's role in place of `tokens` (docs/security.md)."""
    c.JupyterHub.custom_scopes.update({PROBE_TOKENS_SCOPE: {
        "description": "Mint, list and delete kernel-probe tokens (access to one server, at most "
                       f"{PROBE_TOKEN_MAX_LIFETIME // 3600} h) for the GPU reclaim service"}})
    c.JupyterHub.extra_handlers.extend([(ROUTE, ProbeTokensAPIHandler),
                                        (ROUTE + r"/([^/]+)", ProbeTokensAPIHandler),
                                        (LIST_ROUTE, ProbeTokenListAPIHandler)])
