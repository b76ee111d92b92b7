"""The reclaim's grace period in the spawner: bounded, and given to a stop only while the
service's record of a reclaim of that very server is unfinished or stuck, as its API answers
(a real HTTP server stands in for the service here). A service that cannot be asked never
holds a stop up nor lengthens it. The live test: tests/service/test_kernel_window_live.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from aiohttp import web
from traitlets import TraitError

from jupyterhub_gpu_reclaim.spawner import GPUReclaimSpawner
from jupyterhub_gpu_reclaim.spawner.reclaim_window import ReclaimWindow
from jupyterhub_gpu_reclaim.spawner.service_link import ServiceLink

from ..support.fakes import serve

GRACE = 90


def test_the_grace_period_is_bounded_with_a_clear_error():
    spawner = GPUReclaimSpawner.__new__(GPUReclaimSpawner)  # no hub or cluster needed
    assert spawner.reclaim_grace_period == 60
    for fine in (10, 240):
        spawner.reclaim_grace_period = fine
        assert spawner.reclaim_grace_period == fine
    for bad in (9, 241, -1):
        with pytest.raises(TraitError, match="reclaim_grace_period"):
            spawner.reclaim_grace_period = bad
    assert spawner.reclaim_grace_period == 240  # unchanged
    assert "reclaim" in GPUReclaimSpawner.class_traits()["reclaim_grace_period"].help


@pytest.fixture
async def service():
    """An HTTP server answering `api/reclaims` with `service.answer` (status, body)."""
    state = SimpleNamespace(answer=(200, {"reclaims": []}), asked=[])

    async def reclaims(request: web.Request) -> web.Response:
        state.asked.append((dict(request.query), request.headers.get("Authorization")))
        status, body = state.answer
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/services/gpu-reclaim/api/reclaims", reclaims)
    runner, url = await serve(app)
    state.url = f"{url}/services/gpu-reclaim/"
    yield state
    await runner.cleanup()


def spawner(url: str, user: str = "alice", server: str = "") -> SimpleNamespace:
    fake = SimpleNamespace(reclaim_service_url=url, reclaim_service_token="secret-token", reclaim_grace_period=GRACE,
                           user=SimpleNamespace(name=user), name=server, delete_grace_period=1, _log_name=user,
                           log=logging.getLogger("test"))
    fake._ask_service = lambda path, **params: ServiceLink._ask_service(fake, path, **params)
    return fake


def record(server: str, outcome: str | None) -> dict:
    return {"session": f"alice/{server}", "server": server, "rule": "gpu-idle", "gpus": 1, "outcome": outcome}


@pytest.mark.parametrize("reclaims, grace", [
    ([record("", None)], GRACE),  # begun, not finished: the service is stopping it now
    ([record("", "stopped"), record("", "stuck")], GRACE),  # stuck: the service retries it
    ([record("", "stopped")], 0),  # an earlier reclaim: this stop is someone's own
    ([record("train", None)], 0),  # another server of alice's is being reclaimed
    ([], 0),
    ([{"server": ""}, "x", None], 0),  # no outcome key is not "unfinished"
])
async def test_a_stop_gets_the_grace_period_only_while_the_service_reclaims_that_server(service, reclaims, grace):
    service.answer = (200, {"reclaims": reclaims})
    assert await ReclaimWindow._reclaim_grace(spawner(service.url)) == grace
    (query, auth), = service.asked
    assert query == {"user": "alice", "since": "1d"} and auth == "token secret-token"


@pytest.mark.parametrize("answer", [(500, {"message": "down"}), (403, {}), (200, ["not", "a", "dict"]),
                                    (200, {"reclaims": "nope"})])
async def test_an_answer_that_cannot_be_read_gives_the_plain_stop(service, answer):
    service.answer = answer
    assert await ReclaimWindow._reclaim_grace(spawner(service.url)) == 0


async def test_a_service_that_cannot_be_asked_gives_the_plain_stop(caplog):
    with caplog.at_level(logging.WARNING):
        assert await ReclaimWindow._reclaim_grace(spawner("http://127.0.0.1:9/")) == 0
    assert "cannot ask the reclaim service" in caplog.text and "secret-token" not in caplog.text
    assert await ReclaimWindow._reclaim_grace(spawner("")) == 0  # not configured: not asked
