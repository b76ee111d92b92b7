"""Session traces (JSON Lines, format v1): a streaming reader that validates every line,
and a writer, so the service can record its own observations in the same format.

The format is specified in docs/trace-format.md. In short: the first line is the
only ``config`` line (``version`` 1); then ``session``, ``sample``, ``pressure``, ``intent``
and ``label`` lines sorted by their time field. The reader rejects, with a
:class:`TraceError` naming the file and line, an unsorted file, an unknown ``kind`` and a
malformed line; it ignores unknown keys inside a known kind.

Choices the format leaves open, made here:

- Ordering: ``session`` lines sort by ``started``; ``sample``, ``pressure`` and ``intent``
  lines by ``t``. Lines with equal times may come in any order. ``label`` lines carry no
  event time (they are ground truth for scoring), so they may appear anywhere after the
  config line; their session must be defined somewhere in the file (checked at the end).
- Timestamps are RFC 3339 with an offset (``Z`` or ``+00:00``; other offsets are converted
  to UTC); a timestamp without an offset is rejected.
- A ``session`` line needs ``id``, ``user``, ``server``, ``gpus`` and ``started``;
  ``stopped`` (default null), ``admin`` (false), ``profile`` (""), ``groups`` ([]) and
  ``gpu_type`` ("": the GPU product the pod asked for, for policy rules), ``gpu_shared``
  (false: a time-sliced GPU, whose kernels decide) may be left out, and so may ``scenario`` (a string: the kind of session, written by the trace
  generator, ``tracegen``; the backtest scores each kind apart). An ``id`` may appear again
  (the user restarted the server) once the earlier session with that id has stopped, at or
  before the new ``started``.
- A ``sample`` needs ``t``, ``session`` (a session whose line came earlier) and
  ``gpu_util`` (null, or one number 0-100 or null per GPU); ``gpu_mem_used_mib``,
  ``kernels``, ``terminals`` and ``hub_last_activity`` may be left out (null / ``[]``).
  A terminal is ``{"last_activity": ...}`` or a bare timestamp.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Iterator, Literal, Union

from ..policy.observations import IntentChange, Pressure, Sample, Session, SessionInstance, SessionSample
from ..timestamps import format_time
from .trace_fields import (
    MISSING, FieldError, bool_field, get_field, int_field, is_number, kernels_field, per_gpu_field, str_field,
    terminals_field, time_field,
)

__all__ = [
    "TraceError",
    "TraceConfig",
    "TraceSession",
    "Label",
    "Record",
    "TRUTHS",
    "read_trace",
    "record_to_dict",
    "dump_record",
    "write_trace",
]

VERSION = 1
TRUTHS = ("must_keep", "reclaimable", "gray")
Truth = Literal["must_keep", "reclaimable", "gray"]


class TraceError(ValueError):
    """A trace file that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class TraceConfig:
    start: dt.datetime
    end: dt.datetime
    sample_interval_s: float
    gpus_total: int
    version: int = VERSION


@dataclass(frozen=True)
class TraceSession(SessionInstance):
    """A ``session`` line: a session instance and, in a generated trace, the kind of session
    (never shown to the policy)."""

    scenario: str | None = None


@dataclass(frozen=True)
class Label:
    """Ground truth for scoring: ``[from_, to)`` of session ``session`` is ``truth``."""

    session: str
    from_: dt.datetime
    to: dt.datetime
    truth: Truth


Record = Union[TraceConfig, TraceSession, SessionSample, Pressure, IntentChange, Label]


# --------------------------------------------------------------------------- reader


class _Reader:
    def __init__(self, name: str):
        self.name = name
        self.config: TraceConfig | None = None
        # current instance of each session id: (gpus, started, stopped)
        self.sessions: dict[str, TraceSession] = {}
        self.last_t: dt.datetime | None = None
        self.last_t_line = 0
        self.label_sessions: dict[str, int] = {}  # id → first line naming it

    def parse(self, lineno: int, obj: Any) -> Record:
        if not isinstance(obj, dict):
            raise FieldError("a line must be a JSON object")
        kind = obj.get("kind", MISSING)
        if kind is MISSING:
            raise FieldError("missing field 'kind'")
        if self.config is None:
            if kind != "config":
                raise FieldError(f"the first line must be the config line, not kind {json.dumps(kind)}")
            return self._config(obj)
        if kind == "config":
            raise FieldError("a second config line (there must be exactly one, the first line)")
        parse = self._parsers.get(kind) if isinstance(kind, str) else None
        if parse is None:
            raise FieldError(f"unknown kind {json.dumps(kind)}")
        return parse(self, lineno, obj)

    def _order(self, lineno: int, t: dt.datetime, field: str) -> None:
        if self.last_t is not None and t < self.last_t:
            raise FieldError(
                f"{field} {format_time(t)} is earlier than {format_time(self.last_t)} on line "
                f"{self.last_t_line}: the trace must be sorted by time"
            )
        self.last_t = t
        self.last_t_line = lineno

    def _config(self, obj: dict) -> TraceConfig:
        version = get_field(obj, "version")
        if version != VERSION or isinstance(version, bool):
            raise FieldError(f"unsupported version {json.dumps(version)} (this reader reads version {VERSION})")
        start = time_field(obj, "start")
        end = time_field(obj, "end")
        if end < start:
            raise FieldError("end is before start")
        interval = get_field(obj, "sample_interval_s")
        if not is_number(interval) or interval <= 0:
            raise FieldError(f"sample_interval_s must be a positive number, not {json.dumps(interval)}")
        self.config = TraceConfig(start=start, end=end, sample_interval_s=interval,
                                  gpus_total=int_field(obj, "gpus_total"))
        return self.config

    def _session(self, lineno: int, obj: dict) -> TraceSession:
        sid = str_field(obj, "id")
        if not sid:
            raise FieldError("id must not be empty")
        user = str_field(obj, "user")
        server = str_field(obj, "server")
        gpus = int_field(obj, "gpus")
        started = time_field(obj, "started")
        stopped = time_field(obj, "stopped", nullable=True, default=None)
        if stopped is not None and stopped < started:
            raise FieldError("stopped is before started")
        groups = get_field(obj, "groups", [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise FieldError(f"groups must be a list of strings, not {json.dumps(groups)}")
        scenario = obj.get("scenario")
        if scenario is not None and not isinstance(scenario, str):
            raise FieldError(f"scenario must be a string, not {json.dumps(scenario)}")
        previous = self.sessions.get(sid)
        if previous is not None and (previous.stopped is None or previous.stopped > started):
            raise FieldError(f"session {sid} is already running (started {format_time(previous.t)})")
        self._order(lineno, started, "started")
        record = TraceSession(
            session=Session(id=sid, user=user, server=server, gpus=gpus, started=started,
                            admin=bool_field(obj, "admin", False), profile=str_field(obj, "profile", ""),
                            groups=frozenset(groups), gpu_type=str_field(obj, "gpu_type", ""),
                            gpu_shared=bool_field(obj, "gpu_shared", False)),
            stopped=stopped,
            scenario=scenario,
        )
        self.sessions[sid] = record
        return record

    def _known(self, obj: dict) -> TraceSession:
        sid = str_field(obj, "session")
        record = self.sessions.get(sid)
        if record is None:
            raise FieldError(f"unknown session {sid!r} (no session line before this one)")
        return record

    def _sample(self, lineno: int, obj: dict) -> SessionSample:
        t = time_field(obj, "t")
        record = self._known(obj)
        gpus = record.session.gpus
        sample = Sample(
            t=t,
            gpu_util=per_gpu_field(obj, "gpu_util", gpus, required=True, maximum=100.0),
            gpu_mem_used_mib=per_gpu_field(obj, "gpu_mem_used_mib", gpus, required=False, maximum=None),
            kernels=kernels_field(obj),
            terminals=terminals_field(obj),
            hub_last_activity=time_field(obj, "hub_last_activity", nullable=True, default=None),
        )
        self._order(lineno, t, "t")
        return SessionSample(session=record.id, sample=sample)

    def _pressure(self, lineno: int, obj: dict) -> Pressure:
        t = time_field(obj, "t")
        record = Pressure(t=t, pending_gpus=int_field(obj, "pending_gpus"))
        self._order(lineno, t, "t")
        return record

    def _intent(self, lineno: int, obj: dict) -> IntentChange:
        t = time_field(obj, "t")
        sid = self._known(obj).id
        until = time_field(obj, "until", nullable=True)
        self._order(lineno, t, "t")
        return IntentChange(t=t, session=sid, until=until)

    def _label(self, lineno: int, obj: dict) -> Label:
        sid = str_field(obj, "session")
        start = time_field(obj, "from")
        end = time_field(obj, "to")
        if end < start:
            raise FieldError("to is before from")
        truth = get_field(obj, "truth")
        if truth not in TRUTHS:
            raise FieldError(f"truth must be one of {', '.join(TRUTHS)}, not {json.dumps(truth)}")
        if sid not in self.sessions:
            self.label_sessions.setdefault(sid, lineno)
        return Label(session=sid, from_=start, to=end, truth=truth)

    _parsers: dict[str, Callable[[_Reader, int, dict], Record]] = {
        "session": _session,
        "sample": _sample,
        "pressure": _pressure,
        "intent": _intent,
        "label": _label,
    }


def read_trace(source: str | os.PathLike | Iterable[str], *, name: str | None = None) -> Iterator[Record]:
    """Read a trace (a file's path, an open file or any lines) line by line, yielding typed records: first the :class:`TraceConfig`,
    then the other records in file order. Raises :class:`TraceError` ("FILE:LINE: kind:
    what is wrong") at the first bad line; records before it have already been yielded."""
    if isinstance(source, (str, os.PathLike)):
        name = name or os.fspath(source)
        try:
            handle = open(source, encoding="utf-8")
        except OSError as e:
            raise TraceError(f"{name}: cannot read: {e.strerror or e}") from None
        with handle:
            yield from _read(handle, name)
    else:
        yield from _read(source, name or str(getattr(source, "name", "<trace>")))


def _read(handle: Iterable[str], name: str) -> Iterator[Record]:
    reader = _Reader(name)
    loads = json.loads
    lineno = 0
    try:
        for lineno, line in enumerate(handle, 1):  # noqa: B007
            if not line.strip():
                continue
            kind = None
            try:
                obj = loads(line)
                if isinstance(obj, dict):
                    kind = obj.get("kind")
                yield reader.parse(lineno, obj)
            except json.JSONDecodeError as e:
                raise TraceError(f"{name}:{lineno}: not valid JSON: {e.msg} at column {e.colno}") from None
            except FieldError as e:
                prefix = f"{kind}: " if isinstance(kind, str) and kind in _KNOWN else ""
                raise TraceError(f"{name}:{lineno}: {prefix}{e}") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{name}:{lineno + 1}: not UTF-8 ({e.reason})") from None
    if reader.config is None:
        raise TraceError(f"{name}: empty trace: the first line must be the config line")
    for sid, at in reader.label_sessions.items():
        if sid not in reader.sessions:
            raise TraceError(f"{name}:{at}: label: unknown session {sid!r} (no session line in the trace)")


_KNOWN = {"config", "session", "sample", "pressure", "intent", "label"}


# --------------------------------------------------------------------------- writer


def record_to_dict(record: Record) -> dict[str, Any]:
    """The JSON object of one trace line."""
    if isinstance(record, TraceConfig):
        return {"kind": "config", "version": record.version, "start": format_time(record.start),
                "end": format_time(record.end), "sample_interval_s": record.sample_interval_s,
                "gpus_total": record.gpus_total}
    if isinstance(record, TraceSession):
        s = record.session
        out = {"kind": "session", "id": s.id, "user": s.user, "server": s.server, "admin": s.admin,
               "gpus": s.gpus, "profile": s.profile, "started": format_time(s.started),
               "stopped": format_time(record.stopped) if record.stopped else None}
        if s.groups:
            out["groups"] = sorted(s.groups)
        if s.gpu_type:
            out["gpu_type"] = s.gpu_type
        if s.gpu_shared:
            out["gpu_shared"] = True
        if record.scenario is not None:
            out["scenario"] = record.scenario
        return out
    if isinstance(record, SessionSample):
        m = record.sample
        return {
            "kind": "sample", "t": format_time(m.t), "session": record.session,
            "gpu_util": list(m.gpu_util) if m.gpu_util is not None else None,
            "gpu_mem_used_mib": list(m.gpu_mem_used_mib) if m.gpu_mem_used_mib is not None else None,
            "kernels": None if m.kernels is None else [
                {"execution_state": k.execution_state,
                 "last_activity": format_time(k.last_activity) if k.last_activity else None}
                for k in m.kernels],
            "terminals": None if m.terminals is None else [
                {"last_activity": format_time(a) if a else None} for a in m.terminals],
            "hub_last_activity": format_time(m.hub_last_activity) if m.hub_last_activity else None,
        }
    if isinstance(record, Pressure):
        return {"kind": "pressure", "t": format_time(record.t), "pending_gpus": record.pending_gpus}
    if isinstance(record, IntentChange):
        return {"kind": "intent", "t": format_time(record.t), "session": record.session,
                "until": format_time(record.until) if record.until else None}
    if isinstance(record, Label):
        return {"kind": "label", "session": record.session, "from": format_time(record.from_),
                "to": format_time(record.to), "truth": record.truth}
    raise TypeError(f"not a trace record: {record!r}")


def dump_record(record: Record) -> str:
    """One trace line (without the newline)."""
    return json.dumps(record_to_dict(record), separators=(",", ":"))


def write_trace(records: Iterable[Record], target: str | os.PathLike | IO[str]) -> int:
    """Write records as a trace (the caller keeps them sorted; the config first).
    Returns the number of lines written."""
    if isinstance(target, (str, os.PathLike)):
        with open(target, "w", encoding="utf-8") as handle:
            return write_trace(records, handle)
    n = 0
    for record in records:
        target.write(dump_record(record))
        target.write("\n")
        n += 1
    return n
