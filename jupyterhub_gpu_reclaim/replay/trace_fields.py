"""How a trace line's fields are read and checked (docs/trace-format.md): each reader
returns the field's value in its Python type or raises :class:`FieldError` saying what is
wrong, which `trace` reports with the file and line."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..policy.observations import Kernel
from ..timestamps import parse_time

MISSING = object()
_time_cache: dict[str, dt.datetime] = {}


class FieldError(Exception):
    pass


def get_field(obj: dict, key: str, default: Any = MISSING) -> Any:
    if key in obj:
        return obj[key]
    if default is MISSING:
        raise FieldError(f"missing field {key!r}")
    return default


def time_field(obj: dict, key: str, *, nullable: bool = False, default: Any = MISSING) -> Any:
    value = get_field(obj, key, default)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise FieldError(f"{key} must be an RFC 3339 timestamp, not {json.dumps(value)}")
    t = _time_cache.get(value)  # a trace repeats its instants
    if t is None:
        try:
            t = parse_time(value, require_offset=True)
        except ValueError:
            t = None
        if t is None:
            raise FieldError(f"{key} is not an RFC 3339 timestamp with an offset: {value!r}")
        if len(_time_cache) > 100_000:
            _time_cache.clear()
        _time_cache[value] = t
    return t


def str_field(obj: dict, key: str, default: Any = MISSING) -> str:
    value = get_field(obj, key, default)
    if not isinstance(value, str):
        raise FieldError(f"{key} must be a string, not {json.dumps(value)}")
    return value


def bool_field(obj: dict, key: str, default: Any = MISSING) -> bool:
    value = get_field(obj, key, default)
    if not isinstance(value, bool):
        raise FieldError(f"{key} must be true or false, not {json.dumps(value)}")
    return value


def int_field(obj: dict, key: str, *, minimum: int = 0) -> int:
    value = get_field(obj, key)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise FieldError(f"{key} must be an integer, not {json.dumps(value)}")
    if value < minimum:
        raise FieldError(f"{key} must be at least {minimum}, not {value}")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def per_gpu_field(obj: dict, key: str, gpus: int, *, required: bool, maximum: float | None):
    value = get_field(obj, key) if required else obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(f"{key} must be a list with one value per GPU or null, not {json.dumps(value)}")
    if len(value) != gpus:
        raise FieldError(
            f"{key} has {len(value)} value{'s' if len(value) != 1 else ''}, "
            f"the session has {gpus} GPU{'s' if gpus != 1 else ''}"
        )
    for item in value:
        if item is None:
            continue
        if not is_number(item) or item != item:
            raise FieldError(f"{key} values must be numbers or null, not {json.dumps(item)}")
        if item < 0 or (maximum is not None and item > maximum):
            raise FieldError(f"{key} value {item} is outside 0-{maximum if maximum is not None else 'inf'}")
    return tuple(float(x) if x is not None else None for x in value)


def kernels_field(obj: dict) -> tuple[Kernel, ...] | None:
    value = obj.get("kernels")
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(f"kernels must be a list or null, not {json.dumps(value)}")
    kernels = []
    for item in value:
        if not isinstance(item, dict):
            raise FieldError(f"kernels entries must be objects, not {json.dumps(item)}")
        state = item.get("execution_state")
        if not isinstance(state, str):
            raise FieldError(f"kernel execution_state must be a string, not {json.dumps(state)}")
        last = time_field(item, "last_activity", nullable=True, default=None)
        kernels.append(Kernel(execution_state=state, last_activity=last))
    return tuple(kernels)


def terminals_field(obj: dict) -> tuple[dt.datetime | None, ...] | None:
    if "terminals" not in obj:
        return ()
    value = obj["terminals"]
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(f"terminals must be a list or null, not {json.dumps(value)}")
    out = []
    for item in value:
        if isinstance(item, dict):
            out.append(time_field(item, "last_activity", nullable=True, default=None))
        elif isinstance(item, str) or item is None:
            out.append(time_field({"last_activity": item}, "last_activity", nullable=True))
        else:
            raise FieldError(f"terminals entries must be objects or timestamps, not {json.dumps(item)}")
    return tuple(out)
