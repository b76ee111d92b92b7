"""The "keep this session until" control: what the form sends, what user_options carry."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from jupyterhub_gpu_reclaim.spawner import keepalive
from jupyterhub_gpu_reclaim.spawner.keepalive import KeepaliveError

from ..support.clock import at

UTC = dt.timezone.utc
NOW = at(hours=1)  # 09:00 UTC
CAP = dt.timedelta(hours=12)


def parse(**form):
    return keepalive.from_form({k: [v] for k, v in form.items()}, now=NOW, max_keepalive=CAP)


def test_no_choice_is_no_intent():
    assert parse() is None and parse(keepalive="") is None


def test_durations():
    assert parse(keepalive="4h") == NOW + dt.timedelta(hours=4)
    assert parse(keepalive="90m") == NOW + dt.timedelta(minutes=90)


def test_custom_time_in_the_browsers_time_zone():
    # 11:30 in UTC+2 (getTimezoneOffset() = -120) is 09:30 UTC
    assert parse(keepalive="until", keepalive_until="2026-11-02T11:30",
                 keepalive_tz_offset="-120") == NOW + dt.timedelta(minutes=30)
    # without JavaScript the offset is missing: UTC
    assert parse(keepalive="until", keepalive_until="2026-11-02T10:00") == NOW + dt.timedelta(hours=1)


@pytest.mark.parametrize("form, message", [
    ({"keepalive": "until", "keepalive_until": "2026-11-02T08:00"}, "is in the past"),
    ({"keepalive": "until", "keepalive_until": ""}, "Choose the date and time"),
    ({"keepalive": "until", "keepalive_until": "tomorrow"}, "is not a date and time"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "x"}, "time zone"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "9999"}, "time zone"),
    ({"keepalive": "3 days"}, "is not a duration"),
    ({"keepalive": "13h"}, "at most 12 hours from now"),
    ({"keepalive": "until", "keepalive_until": "2026-11-03T09:00"}, "at most 12 hours from now"),
    # absurd values: refused as every bad value is, never an error of the spawn
    ({"keepalive": "until", "keepalive_until": "9999-12-31T23:59:59-23:59"}, "at most 12 hours from now"),
    ({"keepalive": "until", "keepalive_until": "9999-12-31T23:59", "keepalive_tz_offset": "1439"},
     "at most 12 hours from now"),
    ({"keepalive": "until", "keepalive_until": "0001-01-01T00:00:00+23:59"}, "0001-01-01T00:00:00+23:59 is in the past"),
    ({"keepalive": "until", "keepalive_until": "0001-01-01T00:00", "keepalive_tz_offset": "-1439"}, "is in the past"),
    ({"keepalive": "until", "keepalive_until": "2026-13-45T99:99"}, "is not a date and time"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "inf"}, "time zone"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "nan"}, "time zone"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "1e400"}, "time zone"),
    ({"keepalive": "until", "keepalive_until": "2026-11-02T10:00", "keepalive_tz_offset": "1440"}, "time zone"),
    ({"keepalive": "99999999999999h"}, "is not a duration"),
    ({"keepalive": "9999999d"}, "at most 12 hours from now"),
    ({"keepalive": "1e308"}, "is not a duration"),
    ({"keepalive": "nan"}, "is not a duration"),
    ({"keepalive": "inf"}, "is not a duration"),
    ({"keepalive": "-1h"}, "is not a duration"),
    ({"keepalive": "x" * 10_000}, "is not a duration"),
])
def test_bad_values_say_why(form, message):
    with pytest.raises(KeepaliveError, match=re.escape(message)) as e:
        parse(**form)
    assert e.value.status_code == 400 and message in e.value.jupyterhub_message
    assert len(e.value.jupyterhub_message) < 200  # the user's text is quoted cut short


def test_user_options_from_the_api():
    options = {keepalive.OPTION: "2026-11-02T13:00:00Z"}
    assert keepalive.from_user_options(options, now=NOW, max_keepalive=CAP) == NOW + dt.timedelta(hours=4)
    # JupyterHub reuses the last user_options: yesterday's time is dropped, not an error
    old = {keepalive.OPTION: "2026-11-01T13:00:00Z"}
    assert keepalive.from_user_options(old, now=NOW, max_keepalive=CAP) is None
    assert keepalive.from_user_options({}, now=NOW, max_keepalive=CAP) is None
    # a time far in the past is dropped like yesterday's, even one datetime cannot convert
    assert keepalive.from_user_options({keepalive.OPTION: "0001-01-01T00:00:00+23:59"}, now=NOW,
                                       max_keepalive=CAP) is None


@pytest.mark.parametrize("value, message", [
    (5, "not int"), (float("nan"), "not float"), (1e308, "not float"), (True, "not bool"),
    (["2026-11-02T13:00:00Z"], "not list"), ({"until": "2026-11-02T13:00:00Z"}, "not dict"),
    ("soon", "not 'soon'"), ("2026-11-05T00:00:00Z", "at most 12 hours from now"),
    ("9999-12-31T23:59:59-23:59", "at most 12 hours from now"), ("9999-12-31T23:59:59", "at most 12 hours"),
    ("2026-11-02T13:00:00Z" + "0" * 10_000, "must be an ISO 8601 time"),
])
def test_bad_user_options_say_why(value, message):
    """What the REST API can put in user_options (any JSON) is refused with a 400."""
    with pytest.raises(KeepaliveError, match=re.escape(message)) as e:
        keepalive.from_user_options({keepalive.OPTION: value}, now=NOW, max_keepalive=CAP)
    assert e.value.status_code == 400 and len(e.value.jupyterhub_message) < 200


def test_form_offers_the_durations_under_the_cap():
    html = keepalive.form_html(["1h", "4h", "24h"], CAP)
    assert 'value="1h"' in html and 'value="4h"' in html and 'value="24h"' not in html
    assert 'value="until"' in html and "at most 12 hours" in html
    assert 'name="keepalive_until"' in html and 'name="keepalive_tz_offset"' in html


def test_a_link_never_sets_a_keepalive():
    for query in ({"keepalive": ["4h"]}, {"keepalive": ["until"], "keepalive_until": ["2030-01-01T00:00"]},
                  {"keepalive_until": ["2030-01-01T00:00:00Z"]}, {"profile": ["gpu-1"], "keepalive": ["1e308"]}):
        with pytest.raises(KeepaliveError) as err:
            keepalive.refuse_from_link(query)
        assert err.value.status_code == 400 and "A link cannot keep a session alive" in str(err.value)
    for query in ({}, {"profile": ["gpu-1"]}, {"profile": ["gpu-1"], "keepalive": [""]}):
        assert keepalive.refuse_from_link(query) is None
