"""What differs between JupyterHub 5 and 6 for this package, in one place.

The package runs on both: the z2jh chart's hub image has JupyterHub 5.5, and installing the
package never upgrades it. Where JupyterHub 6 has something that 5 lacks, this module gives 5
the same result; what it cannot give is listed in docs/install-z2jh.md ("JupyterHub 5 and 6").
"""

from __future__ import annotations

from typing import Any, Iterable

import jupyterhub
from tornado import web

JUPYTERHUB_MAJOR: int = jupyterhub.version_info[0]
#: JupyterHub 6 reads a spawn link's user options from query arguments with this prefix
#: (/hub/spawn?opt-profile=gpu-1) and ignores the others when any has it
QUERY_OPTION_PREFIX = "opt-"


def grant_user_scopes(c: Any, scopes: Iterable[str]) -> None:
    """Give every user `scopes` on top of the `user` role, in a hub's traitlets config `c`.

    A `user` role in `c.JupyterHub.load_roles` gets them added (JupyterHub 6 ignores
    `extra_user_scopes` once that role is overridden). Otherwise JupyterHub 6 takes them as
    `c.JupyterHub.extra_user_scopes`; JupyterHub 5, which has no such option, gets the
    `user` role with its default scope, `self`, plus these."""
    scopes = list(scopes)
    roles = list(c.JupyterHub.load_roles) if "load_roles" in c.JupyterHub else []
    user = next((role for role in roles if role.get("name") == "user"), None)
    if user is None and JUPYTERHUB_MAJOR >= 6:
        current = c.JupyterHub.extra_user_scopes if "extra_user_scopes" in c.JupyterHub else set()
        c.JupyterHub.extra_user_scopes = set(current) | set(scopes)
        return
    if user is None:
        user = {"name": "user", "scopes": ["self"]}
        roles.append(user)
    user["scopes"] = list(dict.fromkeys([*user.get("scopes", ["self"]), *scopes]))
    c.JupyterHub.load_roles = roles


def user_options_from_query(query: dict[str, list[str]]) -> dict[str, list[str]]:
    """A spawn link's user options, as JupyterHub 6 reads them from /hub/spawn's query: the
    `opt-` arguments without their prefix, or (old links) every argument when none has it.
    JupyterHub 6 has already done this before the spawner sees the query; JupyterHub 5 passes
    the query as it is."""
    if JUPYTERHUB_MAJOR >= 6:
        return query
    prefixed = {key[len(QUERY_OPTION_PREFIX):]: value for key, value in query.items()
                if key.startswith(QUERY_OPTION_PREFIX)}
    if "" in prefixed:
        raise web.HTTPError(422, f"Invalid user-option name {QUERY_OPTION_PREFIX}")
    return prefixed or query


def lab_server_token_scopes(service: str = "gpu-reclaim") -> list[str]:
    """For `c.Spawner.server_token_scopes`: what a single-user server's token has by default
    (the hub's `server` role, as this JupyterHub defines it) plus access to the reclaim
    service, which the JupyterLab extension's server side calls with that token (docs/lab.md).
    The hub grants a server only those its user holds: users need that access too
    (`grant_user_scopes`)."""
    from jupyterhub.roles import get_default_roles

    server = next(role for role in get_default_roles() if role["name"] == "server")
    return [*server["scopes"], f"access:services!service={service}"]
