"""Start again's URL (web/way_back.py): the hub's spawn page for the reclaimed server with
`next` set to JupyterLab's URL of the notebook last active in. The path is the user's text:
each segment encoded, a path a browser would resolve out of the lab never offered."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from jupyterhub_gpu_reclaim.policy.observations import Ran, WhatRan
from jupyterhub_gpu_reclaim.web.way_back import start_again_url

from ..support.clock import at


def next_of(url: str) -> str | None:
    values = parse_qs(urlsplit(url).query).get("next")
    return values[0] if values else None


def test_start_again_opens_the_latest_notebook_of_the_right_server():
    ran = WhatRan.of([Ran("terminal", "1", at(9)), Ran("console", "c.ipynb", at(8)),
                      Ran("notebook", "old.ipynb", at(1)), Ran("notebook", "work/new model.ipynb", at(5))])
    url = start_again_url("/hub/", "alice/", ran)
    assert url.startswith("/hub/spawn/alice?")
    assert next_of(url) == "/user/alice/lab/tree/work/new%20model.ipynb"
    named = start_again_url("/base/hub/", "bob@x/big gpu", ran)
    assert named.startswith("/base/hub/spawn/bob%40x/big%20gpu?")
    assert next_of(named) == "/base/user/bob@x/big%20gpu/lab/tree/work/new%20model.ipynb"


@pytest.mark.parametrize("path,expected", [
    ("a?b#c%2e%2e.ipynb", "a%3Fb%23c%252e%252e.ipynb"),
    ("<script>.ipynb", "%3Cscript%3E.ipynb"),
    ("\u202eevil.ipynb", "%E2%80%AEevil.ipynb"),
])
def test_a_notebooks_name_is_encoded_segment_by_segment(path, expected):
    url = start_again_url("/hub/", "alice/", WhatRan.of([Ran("notebook", path, at(1))]))
    assert next_of(url) == "/user/alice/lab/tree/" + expected


@pytest.mark.parametrize("path", ["../../hub/logout", "a/./b.ipynb", "/abs.ipynb", "a//b.ipynb", "dir/"])
def test_a_path_that_would_leave_the_lab_is_not_offered(path):
    ran = WhatRan.of([Ran("notebook", path, at(2)), Ran("notebook", "safe.ipynb", at(1))])
    assert next_of(start_again_url("/hub/", "alice/", ran)) == "/user/alice/lab/tree/safe.ipynb"
    alone = start_again_url("/hub/", "alice/", WhatRan.of([Ran("notebook", path, at(2))]))
    assert alone == "/hub/spawn/alice"  # the server's default page, as without a record


def test_without_a_record_start_again_is_the_spawn_page():
    assert start_again_url("/hub/", "alice/", None) == "/hub/spawn/alice"
    assert start_again_url("/hub/", "alice/", WhatRan.of([Ran("terminal", "1", at(1))])) == "/hub/spawn/alice"


def test_what_ran_is_shown_as_text_in_the_pages_clock(monkeypatch):
    """The pages' macro (`what_ran`): each name escaped and isolated (<bdi>), its last activity
    as `when` shows times, how many more, and "not known" without a record."""
    from jupyterhub_gpu_reclaim.web import render

    monkeypatch.setattr(render, "utcnow", lambda: at(10))
    macro = render._jinja.get_template("_macros.html").module.what_ran  # type: ignore[attr-defined]
    ran = WhatRan.of([Ran("notebook", '<img src=x onerror="alert(1)">.ipynb', at(1)),
                      Ran("terminal", "\u202e1", None), Ran("notebook", "\ud800", at(2))])
    html = str(macro(ran.shown()))
    assert "<img" not in html and '<bdi class="path">&lt;img src=x onerror=&#34;alert(1)&#34;&gt;.ipynb</bdi>' in html
    assert '<bdi class="path">\u202e1</bdi></li>' in html  # no activity known: no time
    assert html.count("<time ") == 1 and "(9 min ago)" in html
    assert '<li class="more">and 1 more not shown</li>' in html
    assert "not known" in str(macro(None)) and "no notebook or terminal" in str(macro(WhatRan().shown()))
