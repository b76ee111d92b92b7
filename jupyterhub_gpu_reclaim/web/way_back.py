"""The way back after a reclaim: *Start again* is the hub's spawn page for the reclaimed server
(the spawner gives it the resume priority) with `next` set to JupyterLab's URL of the notebook
the user was last active in, `<server>/lab/tree/<path>`. JupyterLab opens its workspace (kept
under home, `~/.jupyter/lab/workspaces`: the documents that were open and their layout) and
that notebook; the hub sends the browser there once the server is up (docs/policy.md, "The
way back").

The path is the user's own text, reported by their server: each of its segments is
percent-encoded (`?`, `#`, `%` and `/` inside a name too), and a path with an empty, `.` or
`..` segment (which a browser would resolve out of the lab) is not offered. Without a notebook
to reopen, the link is the spawn page alone (the server's default page, as before)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from ..policy.observations import WhatRan


def server_url(hub_prefix: str, session: str) -> str:
    """The path of the server of `session` ("alice/" or "alice/big"), as the hub writes it
    (`User.server_url`): `<base_url>user/<name>/[<server>/]`."""
    user, _, server = session.partition("/")
    base = hub_prefix[: -len("hub/")] if hub_prefix.endswith("hub/") else "/"
    return base + "user/" + quote(user, safe="@~") + "/" + (quote(server, safe="@~") + "/" if server else "")


def reopen_path(ran: WhatRan | None) -> str | None:
    """The notebook the server's user was last active in, when its path can go into a URL."""
    for r in ran.ran if ran is not None else ():
        segments = r.path.split("/")
        if r.kind == "notebook" and not any(s in ("", ".", "..") for s in segments):
            return "/".join(quote(s, safe="") for s in segments)
    return None


def start_again_url(hub_prefix: str, session: str, ran: WhatRan | None) -> str:
    """The hub's spawn page for `session`'s server, then JupyterLab with the notebook the user
    was last active in; without one, the server's default page (the hub's own choice)."""
    user, _, server = session.partition("/")
    spawn = hub_prefix + "spawn/" + quote(user, safe="") + ("/" + quote(server, safe="") if server else "")
    path = reopen_path(ran)
    return spawn + ("?" + urlencode({"next": f"{server_url(hub_prefix, session)}lab/tree/{path}"}) if path else "")
