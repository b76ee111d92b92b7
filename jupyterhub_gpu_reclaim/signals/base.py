"""What every signal shares: the error callers count by source, and small helpers for
the HTTP calls the signals make (each with a timeout, none logging a token)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from typing import Any

import aiohttp


class SignalError(Exception):
    """A signal could not be read. `source` ("hub", "dcgm", "prometheus", "kernels",
    "pods") lets callers count errors per source and hold decisions on missing data."""

    def __init__(self, source: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message
        self.status = status  # the HTTP status, when the source answered with an error


class HttpSource:
    """A signal that talks HTTP: one client session, opened on first use, with the
    headers `_headers` and the TLS context `ssl_context` (the hub's internal-ssl, with
    --ssl-enabled); usable as `async with`. It keeps no cookies: none is needed, and a
    cookie one user's server sets must never reach another's."""

    _session: aiohttp.ClientSession | None = None
    ssl_context: ssl.SSLContext | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(ssl=self.ssl_context) if self.ssl_context else None
        return aiohttp.ClientSession(headers=getattr(self, "_headers", None), connector=connector,
                                     cookie_jar=aiohttp.DummyCookieJar())

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._new_session()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def parse_time(value: str | None) -> dt.datetime | None:
    """An ISO 8601 timestamp as JupyterHub and Jupyter Server write it ("...Z"), as an
    aware UTC datetime; naive timestamps are taken as UTC (as idle-culler does)."""
    if not value:
        return None
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    t = dt.datetime.fromisoformat(value)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


async def get_json(session: aiohttp.ClientSession, url: str, *, source: str,
                   timeout: float, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, allow_redirects: bool = True) -> Any:
    """GET `url` and decode its JSON body. Anything but a 2xx answer with JSON — a status
    error, a timeout, a refused connection, a body that is not JSON — is a SignalError."""
    text = await get_text(session, url, source=source, timeout=timeout, headers=headers, params=params,
                          allow_redirects=allow_redirects)
    try:
        return json.loads(text)
    except ValueError as e:
        raise SignalError(source, f"GET {_safe(url)}: not JSON ({e}): {text[:200]!r}") from None


async def get_text(session: aiohttp.ClientSession, url: str, *, source: str,
                   timeout: float, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, allow_redirects: bool = True) -> str:
    """GET `url`; its body as text (see get_json). Without `allow_redirects` a redirect is
    an error (status 3xx), not followed."""
    try:
        async with session.get(url, headers=headers, params=params, allow_redirects=allow_redirects,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            text = await r.text(errors="replace")
            if r.status >= 300:
                raise SignalError(source, f"GET {_safe(url)}: HTTP {r.status}: {text[:200]!r}", r.status)
            return text
    except asyncio.TimeoutError:
        raise SignalError(source, f"GET {_safe(url)}: no answer within {timeout:g} s") from None
    except aiohttp.ClientError as e:
        raise SignalError(source, f"GET {_safe(url)}: {type(e).__name__}: {e}") from None


def hub_message(text: str) -> str:
    """The hub's error message (its API errors are JSON {"status", "message"})."""
    try:
        data: Any = json.loads(text)
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])[:200]
    except ValueError:
        pass
    return text.strip()[:200]


def _safe(url: str) -> str:
    """The URL without its query string (which might carry a token)."""
    return url.split("?", 1)[0]
