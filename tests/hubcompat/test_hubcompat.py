"""What differs between JupyterHub 5 and 6, decided for either major whatever this
environment's JupyterHub is (the live tests run each major's real hub: `make test`)."""

from __future__ import annotations

import pytest
from tornado import web
from traitlets.config import Config

from jupyterhub_gpu_reclaim import hubcompat
from jupyterhub_gpu_reclaim.hubcompat import grant_user_scopes, user_options_from_query

SCOPE = "access:services!service=gpu-reclaim"


@pytest.fixture(params=[5, 6])
def major(request, monkeypatch) -> int:
    monkeypatch.setattr(hubcompat, "JUPYTERHUB_MAJOR", request.param)
    return request.param


def test_users_get_the_scopes_the_way_their_major_has(major):
    c = Config()
    c.JupyterHub.load_roles = [{"name": "gpu-reclaim", "scopes": ["tokens"]}]
    grant_user_scopes(c, [SCOPE])
    if major == 6:
        assert c.JupyterHub.extra_user_scopes == {SCOPE}
        assert [r["name"] for r in c.JupyterHub.load_roles] == ["gpu-reclaim"]
    else:  # JupyterHub 5: its default user role ("self") plus the scope
        assert "extra_user_scopes" not in c.JupyterHub
        assert c.JupyterHub.load_roles[1] == {"name": "user", "scopes": ["self", SCOPE]}


def test_extra_user_scopes_already_set_are_kept(major):
    c = Config()
    c.JupyterHub.extra_user_scopes = {"read:users:activity!user"}
    grant_user_scopes(c, [SCOPE])
    if major == 6:
        assert c.JupyterHub.extra_user_scopes == {"read:users:activity!user", SCOPE}


def test_a_user_role_of_the_config_gets_the_scopes_on_either_major(major):
    # JupyterHub 6 ignores extra_user_scopes once the user role is overridden
    c = Config()
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", SCOPE, "list:users"]}]
    grant_user_scopes(c, [SCOPE, "read:groups"])
    assert c.JupyterHub.load_roles == [{"name": "user", "scopes": ["self", SCOPE, "list:users", "read:groups"]}]
    assert "extra_user_scopes" not in c.JupyterHub


@pytest.mark.parametrize("query, options", [
    ({"opt-profile": ["gpu-1"], "opt-keepalive": ["4h"]}, {"profile": ["gpu-1"], "keepalive": ["4h"]}),
    # with any opt- argument, the others are not options (JupyterHub 6 logs and ignores them)
    ({"opt-profile": ["gpu-1"], "keepalive": ["24h"]}, {"profile": ["gpu-1"]}),
    # old links, without the prefix, keep working
    ({"profile": ["gpu-1"]}, {"profile": ["gpu-1"]}),
    ({"opt-opt-x": ["1"]}, {"opt-x": ["1"]}),
])
def test_a_spawn_links_options_on_jupyterhub5_read_as_jupyterhub6_reads_them(monkeypatch, query, options):
    monkeypatch.setattr(hubcompat, "JUPYTERHUB_MAJOR", 5)
    assert user_options_from_query(query) == options


def test_an_empty_option_name_is_refused_as_jupyterhub6_refuses_it(monkeypatch):
    monkeypatch.setattr(hubcompat, "JUPYTERHUB_MAJOR", 5)
    with pytest.raises(web.HTTPError) as e:
        user_options_from_query({"opt-": ["x"]})
    assert e.value.status_code == 422


def test_jupyterhub6_has_read_the_query_already(monkeypatch):
    monkeypatch.setattr(hubcompat, "JUPYTERHUB_MAJOR", 6)
    query = {"opt-profile": ["gpu-1"]}  # as JupyterHub 6 would never pass it: left alone
    assert user_options_from_query(query) is query
