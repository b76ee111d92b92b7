"""The column types of the observations (schema v6): a sample's lists — per-GPU numbers,
kernels, terminals — and a session's groups, each a compact JSON array in a text column,
read back as the observations' own Python values (`policy.observations`).

Times inside them are `format_time`'s; JSON escapes what PostgreSQL's text cannot hold (a
NUL, a lone surrogate in a kernel state a user's server reported), so any value is storable.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from typing import Any, Callable

import sqlalchemy as sa

from ..policy.observations import Kernel, Ran, SavedDoc, WhatRan, WhatSaved
from ..timestamps import format_time, parse_time

_dumps = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps with options makes one per call


@functools.lru_cache(maxsize=65536)  # a store repeats its instants (a kernel's last activity)
def _time(text: str | None) -> dt.datetime | None:
    return parse_time(text) if text is not None else None


def _text(t: dt.datetime | None) -> str | None:
    return format_time(t) if t is not None else None


class _JsonArray(sa.types.TypeDecorator):
    impl = sa.Text
    cache_ok = True

    @staticmethod
    def encode(value: Any) -> list:
        raise NotImplementedError

    @staticmethod
    def decode(items: list) -> Any:
        raise NotImplementedError

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        if value is None:
            return None
        try:
            return _encoded(self.encode, value)
        except TypeError:  # unhashable (a list for a tuple): not worth a cache entry
            return _dumps(self.encode(value))

    def process_result_value(self, value: str | None, dialect: Any) -> Any:
        return None if value is None else _decoded(self.decode, value)


# Each cycle writes mostly what it wrote the cycle before (an idle GPU's 0 %, an idle
# kernel, a memory reading): a cache keeps the store's write cost per cycle below the
# single JSON line per sample that schema 5 wrote. The values are immutable.
@functools.lru_cache(maxsize=16384)
def _encoded(encode: Callable[[Any], list], value: Any) -> str:
    return _dumps(encode(value))


@functools.lru_cache(maxsize=16384)
def _decoded(decode: Callable[[list], Any], text: str) -> Any:
    return decode(json.loads(text))


class PerGpu(_JsonArray):
    """A number or None per GPU (utilization, memory used); None: no answer."""

    cache_ok = True  # SQLAlchemy asks each class

    @staticmethod
    def encode(value: tuple[float | None, ...]) -> list:
        return list(value)

    @staticmethod
    def decode(items: list) -> tuple[float | None, ...]:
        return tuple(float(x) if x is not None else None for x in items)


class Kernels(_JsonArray):
    """A server's kernels: [[execution_state, last_activity or null], ...]; None: no answer."""

    cache_ok = True

    @staticmethod
    def encode(value: tuple[Kernel, ...]) -> list:
        return [[k.execution_state, _text(k.last_activity)] for k in value]

    @staticmethod
    def decode(items: list) -> tuple[Kernel, ...]:
        return tuple(Kernel(execution_state=state, last_activity=_time(last)) for state, last in items)


class Times(_JsonArray):
    """The last activity (or None) of each of a server's terminals; None: no answer."""

    cache_ok = True

    @staticmethod
    def encode(value: tuple[dt.datetime | None, ...]) -> list:
        return [_text(t) for t in value]

    @staticmethod
    def decode(items: list) -> tuple[dt.datetime | None, ...]:
        return tuple(_time(t) for t in items)


class StringSet(_JsonArray):
    """A set of strings (a session's groups), sorted."""

    cache_ok = True

    @staticmethod
    def encode(value: frozenset[str]) -> list:
        return sorted(value)

    @staticmethod
    def decode(items: list) -> frozenset[str]:
        return frozenset(items)


class WhatRanColumn(sa.types.TypeDecorator):
    """What ran in a reclaimed server (schema v7): {"ran": [[kind, path, last_activity or
    null], ...], "more": n}; None: not known. JSON escapes what a database's text cannot hold."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: WhatRan | None, dialect: Any) -> str | None:
        if value is None:
            return None
        return _dumps({"ran": [[r.kind, r.path, _text(r.last_activity)] for r in value.ran], "more": value.more})

    def process_result_value(self, value: str | None, dialect: Any) -> WhatRan | None:
        if value is None:
            return None
        data = json.loads(value)
        return WhatRan(tuple(Ran(kind, path, _time(last)) for kind, path, last in data["ran"]), int(data["more"]))


class WhatSavedColumn(sa.types.TypeDecorator):
    """What the tabs saved before a reclaim (schema v8): {"tabs": n, "documents": [[path,
    outcome, at or null, reason], ...], "more": n}; None: not known (nobody asked the server,
    or it did not answer)."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: WhatSaved | None, dialect: Any) -> str | None:
        if value is None:
            return None
        return _dumps({"tabs": value.tabs, "more": value.more,
                       "documents": [[d.path, d.outcome, _text(d.at), d.reason] for d in value.documents]})

    def process_result_value(self, value: str | None, dialect: Any) -> WhatSaved | None:
        if value is None:
            return None
        data = json.loads(value)
        return WhatSaved(int(data["tabs"]), tuple(SavedDoc(path, outcome, _time(at), reason)
                                                  for path, outcome, at, reason in data["documents"]),
                         int(data["more"]))


def v6_sample(line: dict) -> dict[str, Any]:
    """The v6 columns of a v5 `sample` row's trace line (the migration: only this release's
    own lines, written by `format_time`, so the times are copied as they are)."""
    kernels, terminals = line.get("kernels"), line.get("terminals", [])

    def last(item: Any) -> Any:
        return item.get("last_activity") if isinstance(item, dict) else item

    return {
        "gpu_util": _array(line.get("gpu_util")),
        "gpu_mem_used_mib": _array(line.get("gpu_mem_used_mib")),
        "kernels": None if kernels is None else _dumps([[k["execution_state"], k.get("last_activity")]
                                                        for k in kernels]),
        "terminals": None if terminals is None else _dumps([last(item) for item in terminals]),
        "hub_last_activity": _time(line.get("hub_last_activity")),
    }


def _array(value: list | None) -> str | None:
    return None if value is None else _dumps(value)
