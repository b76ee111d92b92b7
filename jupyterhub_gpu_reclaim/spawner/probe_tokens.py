"""The hub side of kernel-probe tokens: an API in the hub process that mints only probe
tokens, so that the reclaim service needs no `tokens` scope.

JupyterHub's `POST /hub/api/users/{name}/tokens` checks the new token's scopes against its
*owner's* rights, not the requester's: a service holding `tokens` can mint any user's token
with all that user's rights, a hub admin's included (issue 27). Here the service holds
`custom:gpu-reclaim:probe-tokens` instead, and can mint, for a running server, a token
owned by its user whose one scope is `access:servers!server=USER/NAME` — what a probe needs —
with a lifetime (never a token that does not expire), noted `PROBE_NOTE`; and delete such
tokens. Nothing else: any other scope, a server not running, no lifetime is a 400/404.

The routes mirror the hub's own (`{hub}/api/gpu-reclaim/users/{name}/tokens[/{id}]`, the same
bodies and token model), so the service's client differs only in the URL. A filter on the
scope (`custom:gpu-reclaim:probe-tokens!group=gpu-users`) limits whose servers it may mint for,
on JupyterHub 5 as on 6. `configure_hub(c)` in jupyterhub_config.py installs both; JupyterHub
registers the handler through `JupyterHub.extra_handlers` (it logs that the option is
deprecated: no other hook runs code in the hub's API).
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub import orm
from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from ..signals.probe_tokens import PROBE_NOTE, PROBE_TOKENS_SCOPE, probe_scope

ROUTE = r"/api/gpu-reclaim/users/([^/]+)/tokens"  # under the hub's prefix (/hub/)


class ProbeTokensAPIHandler(APIHandler):
    """`POST …/users/{name}/tokens` (body as the hub's: `scopes` = [the probe scope of one of
    the user's servers], `expires_in`, `note` ignored) and `DELETE …/tokens/{id}` of a probe token."""

    def _user(self, user_name: str) -> Any:
        if self.current_user is None or PROBE_TOKENS_SCOPE not in self.parsed_scopes:
            raise web.HTTPError(403, f"kernel-probe tokens need the scope {PROBE_TOKENS_SCOPE}")
        user = self.find_user(user_name)
        if user is None or not self.get_scope_filter(PROBE_TOKENS_SCOPE)(user, kind="user"):
            raise web.HTTPError(404, f"No probe tokens for user {user_name}")
        return user

    async def post(self, user_name: str) -> None:
        user = self._user(user_name)
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Body must be a JSON dict")
        servers = {probe_scope(user.name, name) for name, spawner in user.orm_spawners.items()
                   if spawner.server is not None}  # running: the only servers probed
        scopes, expires_in = body.get("scopes"), body.get("expires_in")
        if not (isinstance(scopes, list) and len(scopes) == 1 and isinstance(scopes[0], str)
                and scopes[0] in servers):
            raise web.HTTPError(400, f"a probe token has exactly one scope, access:servers!server="
                                     f"{user.name}/NAME of one of the user's running servers, not {scopes!r}")
        if not (type(expires_in) is int and expires_in > 0):
            raise web.HTTPError(400, f"a probe token needs expires_in > 0 (seconds), not {expires_in!r}")
        expires_max = self.settings.get("token_expires_in_max_seconds")
        if expires_max and expires_in > expires_max:  # the hub's own message, which the client reads
            raise web.HTTPError(400, f"token expires_in: {expires_in} must not exceed {expires_max}")
        token = user.new_api_token(note=PROBE_NOTE, expires_in=expires_in, scopes=scopes)
        orm_token = orm.APIToken.find(self.db, token)
        self.log.info("%s minted a kernel-probe token for %s", self.current_user.name, scopes[0])
        self.set_status(201)
        self.write(json.dumps({**self.token_model(orm_token), "token": token}))

    def delete(self, user_name: str, token_id: str) -> None:
        user = self._user(user_name)
        prefix, number = token_id[:1], token_id[1:]
        orm_token = (self.db.query(orm.APIToken).filter_by(id=int(number)).first()
                     if prefix == "a" and number.isascii() and number.isdigit() and len(number) < 19 else None)
        if orm_token is None or orm_token.user is not user.orm_user or orm_token.note != PROBE_NOTE:
            raise web.HTTPError(404, f"No such probe token {token_id} for user {user.name}")
        self.db.delete(orm_token)
        self.db.commit()
        self.set_status(204)


def configure_hub(c: Any) -> None:
    """In jupyterhub_config.py: declare the scope and install the handler. Grant the scope
    to the reclaim service's role in place of `tokens` (docs/security.md)."""
    c.JupyterHub.custom_scopes.update({PROBE_TOKENS_SCOPE: {
        "description": "Mint and delete kernel-probe tokens (access to one server, expiring) "
                       "for the GPU reclaim service"}})
    c.JupyterHub.extra_handlers.extend([(ROUTE, ProbeTokensAPIHandler),
                                        (ROUTE + r"/([^/]+)", ProbeTokensAPIHandler)])
