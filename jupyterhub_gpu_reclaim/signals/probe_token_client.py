"""The credential of kernel probes: per probed server, a short-lived token owned by the
server's user and scoped to that one server, minted from the hub.

Never the service's own token: a user controls their server and can record every request
it receives (a hook in ~/.jupyter/jupyter_server_config.py), and the service's token lists
every user and stops anyone. A token minted here is worth no more than what its owner can
already do on their own server.

Minting: `POST {api}/gpu-reclaim/users/{user}/tokens` with `{"scopes":
["access:servers!server=USER/NAME"], "expires_in": N, "note": PROBE_NOTE}` (NAME is "" for
the default server: `server=alice/`, as JupyterHub writes a server's own access scope): the
hub-side API of spawner/probe_tokens.py, for a service holding `PROBE_TOKENS_SCOPE`, which
mints nothing but such tokens. A service without it falls back to the hub's own
`POST {api}/users/{user}/tokens` (the same body), which needs the scope `tokens` — and
`tokens` checks a new token's scopes against its *owner's* rights, so it mints a hub admin's
token as readily: the first mint reads the service's own scopes (`GET {api}/user`) and warns
when it holds `tokens` unfiltered. Either way the answer's scopes must be exactly the ones
asked for (plus the identify scopes every token carries); a token with any other scope is
deleted unused. The probe-token API refuses an N above PROBE_TOKEN_MAX_LIFETIME, and a hub
with `token_expires_in_max_seconds` below N refuses N: the lifetime drops to the maximum
the answer names.

Reuse: a token serves its server until a quarter of its lifetime is left, then a new one
is minted and the old one deleted. A server that answers 401/403 gets the token deleted
and one new one (`rejected`). `release(sid)` deletes a session's token when it leaves the
ready list; `close()` deletes every token left (shutdown). Deletions are best effort: an
undeleted token still expires. A run that ended without `close()` (killed, the pod gone)
leaves its tokens, and anyone who held the service's token may have minted some: where the
service holds the probe-token scope, the first `check_scopes()` (at start) lists every probe
token the probe-token API shows (`GET {api}/gpu-reclaim/tokens`) and deletes them all, before
this run mints any (the hub's token API has no such list).

Failing to mint (the role lacks the scope, the hub refuses or is down) raises
NoProbeCredential: the probe is not made, the session's kernels are unknown and the policy
holds it. The cause is logged once (again only after minting worked in between).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import time
from dataclasses import dataclass
from typing import Callable, NoReturn, Protocol
from urllib.parse import quote

import aiohttp

from .http_source import HttpSource, SignalError, hub_message

log = logging.getLogger("jupyterhub_gpu_reclaim.signals.probe_token_client")

PROBE_NOTE = "gpu-reclaim kernel probe"
PROBE_TOKENS_SCOPE = "custom:gpu-reclaim:probe-tokens"  # mint probe tokens only (spawner/probe_tokens.py)
# the longest a probe token lives: the probe-token API refuses longer, whoever asks (docs/security.md)
PROBE_TOKEN_MAX_LIFETIME = 3600
HUB_ROUTE, PROBE_ROUTE = "users", "gpu-reclaim/users"  # the hub's token API; the probe-token API
LIST_ROUTE = "gpu-reclaim/tokens"  # every probe token, for the sweep at start
RENEW_FRACTION = 0.75  # a token is replaced once this fraction of its lifetime has passed
_MAX_LIFETIME = re.compile(r"expires_in: \d+ must not exceed (\d+)")  # JupyterHub's 400 message


class NoProbeCredential(SignalError):
    """No credential for a probe, so no probe: the session's kernels are unknown. The cause
    is logged once where it is found, not for every session and cycle."""

    def __init__(self, message: str) -> None:
        super().__init__("kernels", message)


class ProbeCredentials(Protocol):
    async def token(self, user: str, server: str) -> str:
        """A token for probing `user`'s server `server`; raises NoProbeCredential."""
        ...

    async def rejected(self, user: str, server: str, token: str) -> None:
        """The server answered 401/403 to `token`: never use it again."""
        ...


def probe_scope(user: str, server: str) -> str:
    """The one scope of a probe token: access to this server only."""
    return f"access:servers!server={user}/{server}"


def identify_scopes(user: str) -> set[str]:
    """What JupyterHub adds to every token of `user` (scopes.identify_scopes)."""
    return {f"read:users:name!user={user}", f"read:users:groups!user={user}"}


@dataclass
class _Token:
    id: str
    value: str
    renew_at: float  # on the monotonic clock


class ProbeTokens(HttpSource):
    """Mints, caches and deletes probe tokens through the hub API at `api_url` with the
    service's `service_token` (sent to the hub only). `lifetime`: seconds a token lives."""

    def __init__(self, api_url: str, service_token: str, *, lifetime: int = PROBE_TOKEN_MAX_LIFETIME,
                 timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if lifetime < 1:
            raise ValueError("lifetime must be >= 1 s")
        self.api_url = api_url.rstrip("/")
        self.lifetime = int(lifetime)
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.clock = clock
        self._headers = {"Authorization": f"token {service_token}"}
        self._tokens: dict[str, _Token] = {}  # sid → its token
        self._locks: dict[str, asyncio.Lock] = {}  # one mint at a time per session
        self._deleting: set[asyncio.Task] = set()
        self._causes_logged: set[str] = set()
        self._route: str | None = None  # which token API mints, read from the service's scopes
        self._route_lock = asyncio.Lock()

    def __repr__(self) -> str:  # no token
        return f"ProbeTokens({self.api_url!r})"

    def _tokens_url(self, user: str) -> str:
        return f"{self.api_url}/{self._route or PROBE_ROUTE}/{quote(user, safe='')}/tokens"

    async def check_scopes(self) -> None:
        """Read the service's own scopes once (`GET {api}/user`): mint through the probe-token
        API where the service holds its scope, else through the hub's token API, warning when
        the service holds an unfiltered `tokens` (worth any user's token, an admin's too)."""
        async with self._route_lock:
            if self._route is not None:
                return
            try:
                status, text = await self._request("GET", f"{self.api_url}/user")
                scopes = json.loads(text)["scopes"] if status == 200 else None
                if not (isinstance(scopes, list) and all(isinstance(x, str) for x in scopes)):
                    raise ValueError(f"HTTP {status}: {hub_message(text)}")
            except SignalError as e:
                self._fail("unreachable", f"kernel-probe tokens: the service's scopes could not be read: {e.message}")
            except (ValueError, KeyError, TypeError) as e:
                self._fail("whoami", f"kernel-probe tokens: the service's scopes could not be read ({e})")
            if any(x.partition("!")[0] == PROBE_TOKENS_SCOPE for x in scopes):
                await self._sweep()  # before the route is set: no token of this run is minted yet
                self._route = PROBE_ROUTE
                return
            self._route = HUB_ROUTE
            if "tokens" in scopes:
                log.warning("the service's role holds the scope `tokens` without a filter: its token "
                            "can mint a token with any user's rights, a hub admin's included. Grant "
                            "%s (and install its hub-side API) instead: docs/security.md",
                            PROBE_TOKENS_SCOPE)

    async def token(self, user: str, server: str) -> str:
        sid = f"{user}/{server}"
        if self._route is None:
            await self.check_scopes()
        async with self._locks.setdefault(sid, asyncio.Lock()):
            current = self._tokens.get(sid)
            if current is not None and self.clock() < current.renew_at:
                return current.value
            new = await self._mint(user, server)
            self._tokens[sid] = new
            if current is not None:
                self._delete_later(user, current)
            return new.value

    async def rejected(self, user: str, server: str, token: str) -> None:
        sid = f"{user}/{server}"
        current = self._tokens.get(sid)
        if current is not None and current.value == token:
            del self._tokens[sid]
            self._delete_later(user, current)

    def release(self, sid: str) -> None:
        """The session left the ready list: delete its token (in the background)."""
        self._locks.pop(sid, None)
        current = self._tokens.pop(sid, None)
        if current is not None:
            self._delete_later(sid.partition("/")[0], current)

    async def close(self) -> None:
        """Delete every token (shutdown), then close the connection."""
        for sid in list(self._tokens):
            self.release(sid)
        if self._deleting:
            await asyncio.gather(*self._deleting, return_exceptions=True)
        await super().close()

    # ------------------------------------------------------------------ the hub

    async def _sweep(self) -> None:
        """Delete every probe token the probe-token API lists: none is this run's yet, so
        each was left by an earlier run or minted by someone else with the service's token.
        Best effort: a token not deleted expires within PROBE_TOKEN_MAX_LIFETIME."""
        try:
            status, text = await self._request("GET", f"{self.api_url}/{LIST_ROUTE}")
            listed = json.loads(text)["api_tokens"] if status == 200 else None
            if not isinstance(listed, list):
                raise ValueError(f"HTTP {status}: {hub_message(text)}")
            left = [(t["user"], t["id"]) for t in listed]
            if not all(isinstance(x, str) for pair in left for x in pair):
                raise TypeError("a token's user or id is not a string")
        except (SignalError, ValueError, KeyError, TypeError) as e:
            why = e.message if isinstance(e, SignalError) else f"{type(e).__name__}: {e}"
            log.warning("kernel-probe tokens left by an earlier run could not be listed (%s); they "
                        "expire by themselves", why)
            return
        if left:
            log.info("deleting %d kernel-probe token(s) left by an earlier run (or minted with the "
                     "service's token by someone else)", len(left))
        for user, token_id in left:
            self._delete_later(user, _Token(token_id, "", 0.0))
        await asyncio.gather(*self._deleting, return_exceptions=True)

    async def _mint(self, user: str, server: str) -> _Token:
        scope = probe_scope(user, server)
        body = {"scopes": [scope], "expires_in": self.lifetime, "note": PROBE_NOTE}
        try:
            status, text = await self._request("POST", self._tokens_url(user), body)
            m = _MAX_LIFETIME.search(hub_message(text)) if status == 400 else None
            if m and 0 < int(m.group(1)) < self.lifetime:
                log.info("the hub limits API tokens to %s s (token_expires_in_max_seconds): "
                         "kernel-probe tokens live that long", m.group(1))
                self.lifetime = body["expires_in"] = int(m.group(1))
                status, text = await self._request("POST", self._tokens_url(user), body)
        except SignalError as e:
            self._fail("unreachable", f"kernel-probe token request failed: {e.message}")
        if status != 201:
            if self._route == PROBE_ROUTE:
                why = f"the service's {PROBE_TOKENS_SCOPE} must cover this user" if status in (403, 404) else ""
            else:
                why = (f"the service's role needs the scope {PROBE_TOKENS_SCOPE} (or `tokens`, or "
                       "`tokens!group=...` covering this user)") if status == 403 else ""
            self._fail(str(status), f"the hub refused a kernel-probe token for {user!r}: HTTP {status}: "
                                    f"{hub_message(text)}" + (f"; {why}" if why else ""))
        try:
            model = json.loads(text)
            value, token_id = model["token"], model["id"]
            granted = set(model["scopes"])
            owner, expires_at = model.get("user"), model.get("expires_at")
            if not (isinstance(value, str) and value and isinstance(token_id, str)):
                raise TypeError("token or id is not a string")
        except (ValueError, KeyError, TypeError) as e:
            self._fail("model", f"the hub's answer to a kernel-probe token request is not a token "
                                f"model ({type(e).__name__}: {e})")
        if granted != {scope} | identify_scopes(user) or owner != user or not expires_at:
            self._delete_later(user, _Token(token_id, value, 0.0))
            self._fail("scopes", f"the hub gave a kernel-probe token for {user!r} other than asked "
                                 f"(scopes {sorted(granted)}, owner {owner!r}, expires {expires_at!r}); "
                                 f"deleted unused")
        if self._causes_logged:
            log.info("kernel-probe tokens are minted again")
            self._causes_logged.clear()
        log.debug("minted kernel-probe token %s for %r", token_id, f"{user}/{server}")
        return _Token(token_id, value, self.clock() + RENEW_FRACTION * self.lifetime)

    def _fail(self, cause: str, message: str) -> NoReturn:
        if cause not in self._causes_logged:
            self._causes_logged.add(cause)
            log.warning("%s. Sessions whose GPUs look idle are held (no kernel data) until this "
                        "is fixed; logged once", message)
        raise NoProbeCredential(message)

    def _delete_later(self, user: str, token: _Token) -> None:
        task = asyncio.ensure_future(self._delete(user, token))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete(self, user: str, token: _Token) -> None:
        try:
            status, text = await self._request("DELETE", f"{self._tokens_url(user)}/{quote(token.id, safe='')}")
        except SignalError as e:
            status, text = None, e.message
        if status not in (204, 404):  # 404: already gone (revoked by the user, or expired)
            log.warning("could not delete kernel-probe token %s of %r (%s); it expires by itself",
                        token.id, user, f"HTTP {status}: {hub_message(text)}" if status else text)

    async def _request(self, method: str, url: str, body: dict | None = None) -> tuple[int, str]:
        """(status, body) of one hub request; SignalError when there is no answer."""
        what = f"{method} {url.split('?')[0]}"
        try:
            async with self._client().request(method, url, json=body, allow_redirects=False,
                                               timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                return r.status, await r.text(errors="replace")
        except asyncio.TimeoutError:
            raise SignalError("kernels", f"{what}: the hub did not answer within {self.timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise SignalError("kernels", f"{what}: {type(e).__name__}: {e}") from None
