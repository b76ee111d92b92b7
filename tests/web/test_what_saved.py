"""What the tabs saved before a stop, as the pages show it (`_macros.html` what_saved): each
name escaped and isolated (<bdi>), its time as `when` shows times, what became of it in
words, and plainly "not known" or "nothing" where there is no list."""

from __future__ import annotations

from jupyterhub_gpu_reclaim.policy.observations import SavedDoc, WhatSaved

from ..support.clock import at


def test_what_was_saved_is_shown_as_text_in_the_pages_clock(monkeypatch):
    from jupyterhub_gpu_reclaim.web import render

    monkeypatch.setattr(render, "utcnow", lambda: at(10))
    macro = render._jinja.get_template("_macros.html").module.what_saved  # type: ignore[attr-defined]
    saved = WhatSaved(2, (SavedDoc('<img src=x onerror="alert(1)">.ipynb', "saved", at(1), "lead"),
                          SavedDoc("\u202egnp.ipynb", "conflict", at(2), "stop"),
                          SavedDoc("big.ipynb", "saving", None, "stop")), more=2)
    html = str(macro(saved.shown()))
    assert "<img" not in html and '<bdi class="path">&lt;img src=x onerror=&#34;alert(1)&#34;&gt;.ipynb</bdi>' in html
    assert "saved at " in html and "(ahead of the stop)" in html and html.count("<time ") == 2
    assert "not saved: the file changed on disk since it was opened (not overwritten)" in html
    assert "not saved: its save had not finished when the server stopped" in html
    assert '<li class="more">and 2 more not shown</li>' in html
    assert "Saved before the stop: <span" in str(macro(None)) and "not known" in str(macro(None))
    assert "no JupyterLab tab was open" in str(macro(WhatSaved(0).shown()))
    assert "nothing was unsaved in its 2 open tabs" in str(macro(WhatSaved(2).shown()))
