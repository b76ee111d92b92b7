"""What every signal shares: the error callers count by source, small helpers for the HTTP
calls the signals make (each with a timeout and a cap on the answer's size, none logging a
token), and the checks that read one entry of an answer without trusting it.

Everything a signal reads is untrusted: a user controls their server's answers, and a bug
or a corrupt store can make any source answer nonsense with 200 OK. So each entry of an
answer (a user model, a pod, a series, a kernel) is checked on its own: a malformed entry
concerns only its own session, never the whole answer or the cycle."""

from __future__ import annotations

import asyncio
import codecs
import datetime as dt
import json
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from ..oneline import brief
from ..timestamps import parse_time


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


def entry_field(model: object, key: str, kinds: type | tuple[type, ...], default: Any = None,
                *, max_length: int = 1024) -> Any:
    """`model[key]` checked to be one of `kinds` (absent or null: `default`); ValueError
    naming the field otherwise. A bool is not an int here, and strings are bounded."""
    if not isinstance(model, dict):
        raise ValueError(f"not an object: {brief(model)}")
    value = model.get(key)
    if value is None:
        return default
    if type(value) is not kinds:  # exactly the one type asked for (the common case) needs no more checks
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"{key}: {type(value).__name__} {brief(value)}, expected "
                             + " or ".join(k.__name__ for k in kinds))
    if isinstance(value, str) and len(value) > max_length:
        raise ValueError(f"{key}: a string of {len(value)} characters (at most {max_length})")
    return value


def entry_objects(model: object, key: str) -> list[dict[str, Any]]:
    """`model[key]` checked to be a list of objects (absent or null: []); ValueError otherwise."""
    items = entry_field(model, key, list, [])
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"{key}: an item is not an object: {brief(item)}")
    return items


def entry_time(model: object, key: str) -> dt.datetime | None:
    """`model[key]` as `timestamps.parse_time` reads it; ValueError naming the field otherwise."""
    value = entry_field(model, key, str)
    try:
        return parse_time(value)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


MiB = 1024 * 1024
# The most read from one answer of each source (docs/service.md, "Limits"); a larger answer
# is that source's error: a server's kernels → its kernels unknown (held); the hub listing
# or Prometheus → that source failed for the cycle; one dcgm-exporter → its node's GPUs
# unknown; a pod list page → the pod list failed.
MAX_BODY = {"kernels": 1 * MiB, "hub": 16 * MiB, "dcgm": 16 * MiB, "prometheus": 64 * MiB, "pods": 64 * MiB}


async def get_json(session: aiohttp.ClientSession, url: str, *, source: str,
                   timeout: float, limit: int | None = None,
                   headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, allow_redirects: bool = True,
                   loads: Callable[[str], Any] = json.loads, watch: Callable[[bytes], None] | None = None) -> Any:
    """GET `url` and decode its JSON body (with `loads`: json's, or a faster decoder that
    raises ValueError too). Anything but a 2xx answer with JSON — a status error, a
    timeout, a refused connection, a body over `limit` bytes (default: the source's
    MAX_BODY), a body that is not JSON or nested too deeply to decode — is a SignalError.
    `watch` sees each piece of the body as it arrives (read_capped)."""
    text = await get_text(session, url, source=source, timeout=timeout, limit=limit,
                          headers=headers, params=params, allow_redirects=allow_redirects, watch=watch)
    try:
        return loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: [[[[...]]]] 100,000 deep
        raise SignalError(source, f"GET {_safe(url)}: not JSON ({type(e).__name__}: {str(e)[:200]}): "
                                  f"{text[:200]!r}") from None


async def get_text(session: aiohttp.ClientSession, url: str, *, source: str,
                   timeout: float, limit: int | None = None,
                   headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, allow_redirects: bool = True,
                   watch: Callable[[bytes], None] | None = None) -> str:
    """GET `url` and return its body as text; SignalError as get_json (but any text).
    Without `allow_redirects` a redirect is an error (status 3xx), not followed."""
    limit = limit or MAX_BODY[source]
    try:
        async with session.get(url, headers=headers, params=params, allow_redirects=allow_redirects,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status >= 300:
                snippet = (await r.content.read(200)).decode("utf-8", "replace")
                location = r.headers.get("Location") if r.status < 400 else None
                raise SignalError(source, f"GET {_safe(url)}: HTTP {r.status}: " + (
                    f"a redirect to {_shown(location)}" if location else repr(snippet)), r.status)
            body = await read_capped(r.content, r.content_length, limit, watch)
            if body is None:
                raise SignalError(source, f"GET {_safe(url)}: the answer is larger than {limit} bytes")
            return body.decode(_charset(r.charset), errors="replace")
    except asyncio.TimeoutError:
        raise SignalError(source, f"GET {_safe(url)}: no answer within {timeout:g} s") from None
    except aiohttp.ClientError as e:
        raise SignalError(source, f"GET {_safe(url)}: {type(e).__name__}: {e}") from None


async def read_capped(content: aiohttp.StreamReader, length: int | None, limit: int,
                      watch: Callable[[bytes], None] | None = None) -> bytes | None:
    """The whole body, or None as soon as it is known to exceed `limit` bytes (from its
    Content-Length, or while reading: only `limit` bytes are ever held). `watch` is called
    with each piece as it arrives: an exception it raises stops the reading (the connection
    is closed, the rest never read) and goes to the caller."""
    if length is not None and length > limit:
        return None
    chunks, size = [], 0
    async for chunk in content.iter_chunked(256 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        if watch is not None:
            watch(chunk)
        chunks.append(chunk)
    return b"".join(chunks)


def _charset(name: str | None) -> str:
    try:
        return codecs.lookup(name).name if name else "utf-8"
    except LookupError:  # a made-up charset in Content-Type
        return "utf-8"


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
    """The URL as errors and logs may show it: no query string (which might carry a
    token), no password (an admin may put one in --prometheus-url)."""
    return hide_password(url.split("?", 1)[0])


def _shown(location: str) -> str:
    """Where a redirect leads, as errors may show it (`_safe`, short: any server may send one)."""
    try:
        return brief(_safe(location))
    except ValueError:  # not a URL urlsplit reads
        return brief(location.split("?", 1)[0])


def hide_password(url: str) -> str:
    """The URL with any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
