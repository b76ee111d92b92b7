"""Times, read and written in one place (jupyterhub_gpu_reclaim.timestamps): the strict
parser for what anyone may have written, the lenient one for Kubernetes objects, the one
format, and the `since` reader the CLI and the API share."""

from __future__ import annotations

import datetime as dt

import pytest

from jupyterhub_gpu_reclaim.timestamps import (
    format_time,
    parse_since,
    parse_time,
    parse_time_lenient,
)

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- strict

def test_parse_time_forms():
    assert parse_time("2026-01-01T00:00:00Z") == T0
    assert parse_time("2026-01-01T00:00:00.000000Z") == T0
    assert parse_time("2026-01-01T01:00:00+01:00") == T0
    assert parse_time("2026-01-01T00:00:00") == T0  # naive = UTC, as idle-culler
    assert parse_time(None) is None and parse_time("") is None


@pytest.mark.parametrize("value,message", [
    ("9999-12-31T23:59:59-23:59", "out of range once in UTC"),  # OverflowError in astimezone
    ("0001-01-01T00:00:00+01:00", "out of range once in UTC"),
    ("9999-12-31T23:59:59Z", "out of range (1970-2999)"),        # would overflow any deadline
    ("0001-01-01T00:00:00Z", "out of range (1970-2999)"),
    ("1969-12-31T23:59:59Z", "out of range (1970-2999)"),
    ("3000-01-01T00:00:00Z", "out of range (1970-2999)"),
    ("99999-01-01T00:00:00Z", "not a timestamp"),
    ("2026-13-01T00:00:00Z", "not a timestamp"),
    ("2026-01-01T00:00:00+24:00", "not a timestamp"),
    ("yesterday", "not a timestamp"),
    ("2026-01-01T00:00:00Z\r\nFORGED", "not a timestamp"),
    ("2026-01-01T00:00:00\x00Z", "not a timestamp"),  # fromisoformat alone reads it
    ("2026-01-01T00:00:00\u200bZ", "not a timestamp"),
    ("2" * 100_000, "100000 characters"),
    (1767225600, "not a timestamp: int"),
    (float("nan"), "not a timestamp: float"),
    (float("inf"), "not a timestamp: float"),
    (10 ** 400, "not a timestamp: int"),
    (True, "not a timestamp: bool"),
    (["2026-01-01T00:00:00Z"], "not a timestamp: list"),
    ({"t": 1}, "not a timestamp: dict"),
    (0, "not a timestamp: int"),
])
def test_parse_time_refuses_hostile_input_with_a_value_error(value, message):
    with pytest.raises(ValueError) as err:
        parse_time(value)
    assert message in str(err.value) and len(str(err.value)) < 200
    assert "\n" not in str(err.value)  # quoted: a log line it goes into cannot be forged


def test_parse_time_of_deeply_nested_input_is_brief():
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    with pytest.raises(ValueError, match="list"):
        parse_time(deep)


def test_parse_time_reads_what_rfc3339_and_kubernetes_write():
    assert parse_time("2026-01-01T00:00:00z") == T0  # RFC 3339 allows a lowercase z
    assert parse_time("2026-01-01t00:00:00Z") == T0
    assert parse_time("2026-01-01T00:00:00.123456789Z") == T0.replace(microsecond=123456)  # nanoseconds
    assert parse_time("2026-01-01T00:00:00.5Z") == T0.replace(microsecond=500000)


def test_an_offset_can_be_required():
    assert parse_time("2026-01-01T02:00:00+02:00", require_offset=True) == T0
    for value in ("2026-01-01T00:00:00", "2026-01-01"):
        with pytest.raises(ValueError, match="offset"):
            parse_time(value, require_offset=True)
    assert parse_time(None, require_offset=True) is None


# --------------------------------------------------------------------------- lenient


def test_parse_time_lenient_forms():
    assert parse_time_lenient("2025-01-01T00:00:01Z") == dt.datetime(2025, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert parse_time_lenient("2025-01-01T00:00:01.123456789Z").microsecond == 123456
    assert parse_time_lenient(" 2025-01-01T01:00:01+01:00 ") == dt.datetime(2025, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert parse_time_lenient(dt.datetime(2025, 1, 1)) == dt.datetime(2025, 1, 1, tzinfo=UTC)
    tz = dt.timezone(dt.timedelta(hours=2))
    assert parse_time_lenient(dt.datetime(2025, 1, 1, 2, tzinfo=tz)) == dt.datetime(2025, 1, 1, tzinfo=UTC)
    for value in (None, "", "nonsense", 12, ["2025-01-01T00:00:01Z"], "9999-12-31T23:59:59-23:59"):
        assert parse_time_lenient(value) is None, value


# --------------------------------------------------------------------------- writing


def test_format_time_is_utc_with_z_and_microseconds_only_when_present():
    assert format_time(T0) == "2026-01-01T00:00:00Z"
    assert format_time(T0.replace(microsecond=120)) == "2026-01-01T00:00:00.000120Z"
    assert format_time(dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))) == \
        "2026-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="naive"):
        format_time(dt.datetime(2026, 1, 1))
    for t in (T0, T0.replace(microsecond=1), dt.datetime(1970, 1, 1, tzinfo=UTC)):
        assert parse_time(format_time(t), require_offset=True) == t


# --------------------------------------------------------------------------- since


def test_parse_since_reads_a_duration_back_or_a_time():
    now = T0 + dt.timedelta(days=10)
    assert parse_since("7d", now) == T0 + dt.timedelta(days=3)
    assert parse_since("1h30m", now) == now - dt.timedelta(minutes=90)
    assert parse_since("3600", now) == now - dt.timedelta(hours=1)
    assert parse_since("2026-01-02T00:00:00Z", now) == T0 + dt.timedelta(days=1)
    assert parse_since("2026-01-02T02:00:00+02:00", now) == T0 + dt.timedelta(days=1)
    assert parse_since("2026-01-02T00:00:00", now) == T0 + dt.timedelta(days=1)  # UTC without an offset
    for bad in ("", "yesterday", "-7d", "2026-13-01T00:00:00Z", "9999-01-01T00:00:00Z"):
        with pytest.raises(ValueError):
            parse_since(bad, now)
    with pytest.raises(OverflowError):
        parse_since("99999999d", now)
