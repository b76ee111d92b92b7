"""What the server tells its tabs as it stops (lab/jupyterhub_gpu_reclaim_lab/stopped.py), from
the service's answer: only a reclaim of this server under way, its words bounded, and a
Start again that is a path on the hub (or the hub's home), never another site or a script."""

from __future__ import annotations

from jupyterhub_gpu_reclaim_lab.stopped import MAX_PARTS, MAX_TEXT, hub_page, notice

RECLAIM = {"session": "alice/", "outcome": None, "why": "an admin (admin) reclaimed it",
           "kept": "files under your home directory", "lost": "running processes", "again": "/hub/spawn/alice"}


def test_the_reclaim_under_way_of_this_server_is_told():
    answer = {"reclaims": [{**RECLAIM, "outcome": "stopped", "why": "an old one"}, RECLAIM,
                           {**RECLAIM, "session": "alice/big", "why": "another server's"}]}
    assert notice(answer, "alice/", ["a.ipynb"], "") == {
        "why": "an admin (admin) reclaimed it", "why_parts": [], "kept": "files under your home directory",
        "lost": "running processes", "saved": ["a.ipynb"], "again": "/hub/spawn/alice"}
    assert notice(answer, "alice/", [], "https://hub.example")["again"] == "https://hub.example/hub/spawn/alice"


def test_no_reclaim_under_way_is_no_notice():
    """The user's own stop, or the hub's: JupyterLab's own dialog says enough."""
    assert notice({"reclaims": [{**RECLAIM, "outcome": "stopped"}]}, "alice/", [], "") is None
    assert notice({"reclaims": [RECLAIM]}, "bob/", [], "") is None
    for answer in ({}, {"reclaims": "x"}, {"reclaims": [1, None, {"session": "alice/", "outcome": None}]}):
        assert notice(answer, "alice/", [], "") is None


def test_start_again_is_a_path_on_the_hub_else_the_hubs_home():
    for bad in ("//evil.example/x", "javascript:alert(1)", "https://evil.example/", "", None, 3, "/" + "x" * MAX_TEXT):
        assert hub_page(bad, "") is None
        assert notice({"reclaims": [{**RECLAIM, "again": bad}]}, "alice/", [], "")["again"] == "/hub/home"
        assert notice({"reclaims": [{**RECLAIM, "again": bad}]}, "alice/", [], "", "/jh/")["again"] == "/jh/hub/home"


def test_the_words_are_bounded_and_text():
    told = notice({"reclaims": [{**RECLAIM, "why": "w" * 5000, "kept": ["not text"]}]}, "alice/", [], "")
    assert told is not None and len(told["why"]) == MAX_TEXT and told["kept"] == ""


def test_the_reasons_parts_are_text_fields_and_bounded():
    """The reason's words and times (the service's `why_parts`), its text fields only; none
    where they are not a list of objects (the tab then shows `why`)."""
    parts = [{"text": "nothing has run on the GPU since "},
             {"time": "2026-11-02T13:22:00Z", "text": "13:22 UTC", "title": "x" * 5000, "relative": "38 min ago",
              "html": "<b>", "extra": 1}]
    told = notice({"reclaims": [{**RECLAIM, "why_parts": parts}]}, "alice/", [], "")
    assert told is not None and told["why_parts"] == [
        parts[0], {"time": "2026-11-02T13:22:00Z", "text": "13:22 UTC", "title": "x" * MAX_TEXT, "relative": "38 min ago"}]
    for bad in ("x", [1], [None], [{"text": "a"}] * (MAX_PARTS + 1), {"text": "a"}):
        assert notice({"reclaims": [{**RECLAIM, "why_parts": bad}]}, "alice/", [], "")["why_parts"] == []
