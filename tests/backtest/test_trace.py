"""The trace reader and writer (format v1, docs/trace-format.md)."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest

from jupyterhub_gpu_reclaim.policy.observations import IntentChange, Pressure, SessionSample
from jupyterhub_gpu_reclaim.replay.trace import (
    Label,
    TraceConfig,
    TraceError,
    TraceSession,
    dump_record,
    read_trace,
    write_trace,
)

from ..support.traces import EXAMPLE, generate_trace

UTC = dt.timezone.utc


def loads_trace(text: str, name: str = "<trace>") -> list:
    return list(read_trace(io.StringIO(text), name=name))


# --------------------------------------------------------------------------- generator


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "generated.jsonl"
    generate_trace(path, lines=5000)
    return path


def traces(generated: Path) -> list[Path]:
    return [generated] + ([EXAMPLE] if EXAMPLE.exists() else [])


# --------------------------------------------------------------------------- accepting


def test_reads_generated_trace(generated):
    records = list(read_trace(generated))
    assert isinstance(records[0], TraceConfig)
    kinds = {type(r) for r in records[1:]}
    assert kinds == {TraceSession, SessionSample, Pressure, IntentChange, Label}
    n_lines = sum(1 for _ in open(generated))
    assert len(records) == n_lines


@pytest.mark.skipif(not EXAMPLE.exists(), reason="../shared is not beside the clone (the generated trace is tested instead)")
def test_reads_example_trace():
    records = list(read_trace(EXAMPLE))
    assert len(records) == 5099
    assert isinstance(records[0], TraceConfig) and records[0].gpus_total == 16
    sessions = [r for r in records if isinstance(r, TraceSession)]
    assert len(sessions) == 12
    assert sum(isinstance(r, SessionSample) for r in records) == 5001
    assert sum(isinstance(r, Label) for r in records) == 19


def test_round_trip(generated, tmp_path):
    for path in traces(generated):
        records = list(read_trace(path))
        out = tmp_path / "copy.jsonl"
        assert write_trace(records, out) == len(records)
        assert list(read_trace(out)) == records


GOOD_HEAD = [
    {"kind": "config", "version": 1, "start": "2026-11-02T08:00:00Z", "end": "2026-11-03T08:00:00Z",
     "sample_interval_s": 60, "gpus_total": 16},
    {"kind": "session", "id": "alice/", "user": "alice", "server": "", "admin": False, "gpus": 1,
     "profile": "a100", "started": "2026-11-02T09:00:00Z", "stopped": None},
]
GOOD_SAMPLE = {"kind": "sample", "t": "2026-11-02T09:05:00Z", "session": "alice/",
               "gpu_util": [0.0], "gpu_mem_used_mib": [0],
               "kernels": [{"execution_state": "idle", "last_activity": "2026-11-02T09:04:10Z"}],
               "terminals": [], "hub_last_activity": "2026-11-02T09:04:30Z"}


def text(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def test_format_examples_parse():
    records = loads_trace(text(*GOOD_HEAD, GOOD_SAMPLE,
        {"kind": "pressure", "t": "2026-11-02T09:05:00Z", "pending_gpus": 2},
        {"kind": "intent", "t": "2026-11-02T12:00:00Z", "session": "alice/", "until": "2026-11-02T17:00:00Z"},
        {"kind": "intent", "t": "2026-11-02T12:30:00Z", "session": "alice/", "until": None},
        {"kind": "label", "session": "alice/", "from": "2026-11-02T09:00:00Z", "to": "2026-11-02T13:00:00Z",
         "truth": "must_keep"}))
    sample = records[2]
    assert sample.session == "alice/" and sample.sample.gpu_util == (0.0,)
    assert sample.sample.kernels[0].execution_state == "idle"
    assert sample.sample.hub_last_activity == dt.datetime(2026, 11, 2, 9, 4, 30, tzinfo=UTC)
    assert records[3] == Pressure(t=dt.datetime(2026, 11, 2, 9, 5, tzinfo=UTC), pending_gpus=2)
    assert records[5].until is None
    assert records[6].truth == "must_keep" and records[6].from_.hour == 9
    assert records[1].stopped is None and records[1].session.gpus == 1


def test_unknown_keys_ignored_and_nulls_accepted():
    sample = dict(GOOD_SAMPLE, gpu_util=None, kernels=None, colour="blue")
    sample.pop("terminals")
    session = dict(GOOD_HEAD[1], favourite="tea")
    records = loads_trace(text(dict(GOOD_HEAD[0], comment="x"), session, sample))
    assert records[2].sample.gpu_util is None and records[2].sample.kernels is None
    assert records[2].sample.terminals == ()
    one_missing = dict(GOOD_SAMPLE, gpu_util=[None])
    assert loads_trace(text(*GOOD_HEAD, one_missing))[2].sample.gpu_util == (None,)


def test_dump_record_is_one_line():
    records = loads_trace(text(*GOOD_HEAD, GOOD_SAMPLE))
    line = dump_record(records[2])
    assert "\n" not in line and json.loads(line)["session"] == "alice/"


def test_a_session_may_carry_its_gpu_type():
    """Optional (policy rules match on it): written only when known, read back as written."""
    (_, plain) = loads_trace(text(GOOD_HEAD[0], GOOD_HEAD[1]))
    assert plain.session.gpu_type == "" and "gpu_type" not in json.loads(dump_record(plain))
    (_, typed) = loads_trace(text(GOOD_HEAD[0], {**GOOD_HEAD[1], "gpu_type": "NVIDIA-H100-80GB-HBM3"}))
    assert typed.session.gpu_type == "NVIDIA-H100-80GB-HBM3"
    assert json.loads(dump_record(typed))["gpu_type"] == "NVIDIA-H100-80GB-HBM3"
    bad([GOOD_HEAD[0], {**GOOD_HEAD[1], "gpu_type": 7}], "gpu_type must be a string")


def test_a_session_may_be_on_a_shared_gpu():
    (_, plain) = loads_trace(text(*GOOD_HEAD))
    assert not plain.session.gpu_shared and "gpu_shared" not in json.loads(dump_record(plain))
    (_, shared) = loads_trace(text(GOOD_HEAD[0], {**GOOD_HEAD[1], "gpu_shared": True}))
    assert shared.session.gpu_shared and json.loads(dump_record(shared))["gpu_shared"] is True
    bad([GOOD_HEAD[0], {**GOOD_HEAD[1], "gpu_shared": "yes"}], "gpu_shared must be true or false")


def test_restarted_session_id_is_a_new_session():
    first = dict(GOOD_HEAD[1], stopped="2026-11-02T09:30:00Z")
    again = dict(GOOD_HEAD[1], started="2026-11-02T10:00:00Z")
    records = loads_trace(text(GOOD_HEAD[0], first, again))
    assert len(records) == 3
    with pytest.raises(TraceError, match=r"t.jsonl:3: session: session alice/ is already running"):
        loads_trace(text(GOOD_HEAD[0], GOOD_HEAD[1], again), name="t.jsonl")


# --------------------------------------------------------------------------- rejecting


def bad(lines: list, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        loads_trace(text(*lines), name="example.jsonl")


@pytest.mark.parametrize("line, match", [
    ("{not json", r"^example.jsonl:3: not valid JSON"),
    ("[1, 2]", r"^example.jsonl:3: a line must be a JSON object"),
    ({"t": "2026-11-02T09:05:00Z"}, r"^example.jsonl:3: missing field 'kind'"),
    ({"kind": "bogus", "t": "2026-11-02T09:05:00Z"}, r'^example.jsonl:3: unknown kind "bogus"'),
    (dict(GOOD_SAMPLE, gpu_util=[1.0, 2.0]),
     r"^example.jsonl:3: sample: gpu_util has 2 values, the session has 1 GPU$"),
    (dict(GOOD_SAMPLE, gpu_mem_used_mib=[]), r"^example.jsonl:3: sample: gpu_mem_used_mib has 0 values"),
    (dict(GOOD_SAMPLE, gpu_util=["5"]), r"^example.jsonl:3: sample: gpu_util values must be numbers"),
    (dict(GOOD_SAMPLE, gpu_util=[150]), r"^example.jsonl:3: sample: gpu_util value 150 is outside 0-100"),
    (dict(GOOD_SAMPLE, gpu_util=7), r"^example.jsonl:3: sample: gpu_util must be a list"),
    ({k: v for k, v in GOOD_SAMPLE.items() if k != "gpu_util"},
     r"^example.jsonl:3: sample: missing field 'gpu_util'"),
    ({k: v for k, v in GOOD_SAMPLE.items() if k != "t"}, r"^example.jsonl:3: sample: missing field 't'"),
    (dict(GOOD_SAMPLE, t="2026-11-02 09:05"), r"^example.jsonl:3: sample: t is not an RFC 3339 timestamp"),
    (dict(GOOD_SAMPLE, t="2026-11-02T09:05:00"), r"^example.jsonl:3: sample: t is not an RFC 3339 timestamp"),
    (dict(GOOD_SAMPLE, t="yesterday"), r"^example.jsonl:3: sample: t is not an RFC 3339"),
    (dict(GOOD_SAMPLE, t=12), r"^example.jsonl:3: sample: t must be an RFC 3339 timestamp"),
    (dict(GOOD_SAMPLE, hub_last_activity="2026-13-02T09:00:00Z"),
     r"^example.jsonl:3: sample: hub_last_activity is not an RFC 3339"),
    (dict(GOOD_SAMPLE, session="bob/"), r"^example.jsonl:3: sample: unknown session 'bob/'"),
    (dict(GOOD_SAMPLE, kernels=[{"last_activity": None}]), r"^example.jsonl:3: sample: kernel execution_state"),
    (dict(GOOD_SAMPLE, kernels="idle"), r"^example.jsonl:3: sample: kernels must be a list"),
    (dict(GOOD_SAMPLE, terminals=[5]), r"^example.jsonl:3: sample: terminals entries"),
    ({"kind": "pressure", "t": "2026-11-02T09:05:00Z"}, r"^example.jsonl:3: pressure: missing field 'pending_gpus'"),
    ({"kind": "pressure", "t": "2026-11-02T09:05:00Z", "pending_gpus": -1},
     r"^example.jsonl:3: pressure: pending_gpus must be at least 0"),
    ({"kind": "pressure", "t": "2026-11-02T09:05:00Z", "pending_gpus": "2"},
     r"^example.jsonl:3: pressure: pending_gpus must be an integer"),
    ({"kind": "intent", "t": "2026-11-02T09:05:00Z", "session": "alice/"},
     r"^example.jsonl:3: intent: missing field 'until'"),
    ({"kind": "intent", "t": "2026-11-02T09:05:00Z", "session": "carol/", "until": None},
     r"^example.jsonl:3: intent: unknown session 'carol/'"),
    ({"kind": "label", "session": "alice/", "from": "2026-11-02T09:00:00Z", "to": "2026-11-02T10:00:00Z",
      "truth": "maybe"}, r"^example.jsonl:3: label: truth must be one of must_keep, reclaimable, gray"),
    ({"kind": "label", "session": "alice/", "from": "2026-11-02T09:00:00Z", "truth": "gray"},
     r"^example.jsonl:3: label: missing field 'to'"),
    ({"kind": "label", "session": "zed/", "from": "2026-11-02T09:00:00Z", "to": "2026-11-02T10:00:00Z",
      "truth": "gray"}, r"^example.jsonl:3: label: unknown session 'zed/'"),
    (dict(GOOD_HEAD[1], id="bob/", gpus="one"), r"^example.jsonl:3: session: gpus must be an integer"),
    (dict(GOOD_HEAD[1], id="bob/", admin="no"), r"^example.jsonl:3: session: admin must be true or false"),
    ({k: v for k, v in GOOD_HEAD[1].items() if k != "user"} | {"id": "bob/"},
     r"^example.jsonl:3: session: missing field 'user'"),
    (GOOD_HEAD[0], r"^example.jsonl:3: config: a second config line"),
])
def test_malformed_line_is_rejected_with_its_number(line, match):
    bad([*GOOD_HEAD, line], match)


def test_unsorted_is_rejected():
    later = dict(GOOD_SAMPLE, t="2026-11-02T09:10:00Z")
    earlier = {"kind": "pressure", "t": "2026-11-02T09:01:00Z", "pending_gpus": 0}
    bad([*GOOD_HEAD, later, earlier],
        r"^example.jsonl:4: pressure: t 2026-11-02T09:01:00Z is earlier than 2026-11-02T09:10:00Z on line 3")
    session = dict(GOOD_HEAD[1], id="bob/", user="bob", started="2026-11-02T09:00:00Z")
    bad([*GOOD_HEAD, later, session], r"^example.jsonl:4: session: started .* is earlier than")


def test_equal_times_in_any_order_and_labels_anywhere():
    label = {"kind": "label", "session": "alice/", "from": "2026-11-02T09:00:00Z",
             "to": "2026-11-02T10:00:00Z", "truth": "gray"}
    a = dict(GOOD_SAMPLE)
    p = {"kind": "pressure", "t": GOOD_SAMPLE["t"], "pending_gpus": 1}
    assert len(loads_trace(text(*GOOD_HEAD, a, p, label))) == 5
    assert len(loads_trace(text(*GOOD_HEAD, p, a, label))) == 5


def test_config_must_come_first_and_be_version_1():
    bad([GOOD_HEAD[1]], r"^example.jsonl:1: session: the first line must be the config line")
    bad([dict(GOOD_HEAD[0], version=2)], r"^example.jsonl:1: config: unsupported version 2")
    bad([{k: v for k, v in GOOD_HEAD[0].items() if k != "end"}], r"^example.jsonl:1: config: missing field 'end'")
    bad([dict(GOOD_HEAD[0], sample_interval_s=0)], r"^example.jsonl:1: config: sample_interval_s must be a positive")
    with pytest.raises(TraceError, match="empty trace"):
        loads_trace("", name="example.jsonl")


def test_error_names_file_and_line_of_a_path(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(text(*GOOD_HEAD, GOOD_SAMPLE, dict(GOOD_SAMPLE, gpu_util=[1, 2])))
    with pytest.raises(TraceError) as info:
        list(read_trace(path))
    assert str(info.value) == f"{path}:4: sample: gpu_util has 2 values, the session has 1 GPU"


def test_reader_streams(tmp_path):
    # records before the bad line come out before the error: the reader does not load the file first
    stream = read_trace(io.StringIO(text(*GOOD_HEAD, "{oops")), name="s")
    assert isinstance(next(stream), TraceConfig)
    assert isinstance(next(stream), TraceSession)
    with pytest.raises(TraceError, match="^s:3:"):
        next(stream)
