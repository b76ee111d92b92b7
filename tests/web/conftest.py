"""One cluster and one hub with the service and its pages for the whole package, not one a
module (each took 10-30 s to start on two cores). Each module still finds the hub as new
(`hub`): no server running and an empty store. What the service keeps in memory is a
session's last decision (dropped with the session) and each user's write budget (refilled
within a minute)."""

import asyncio
import sqlite3
import time

import pytest

from ..support.live import sim_fixture
from ..support.hubapi import HubAPI
from ..support.service_hub import cycles
from ..support.web_client import start_web_hub


sim = sim_fixture("package")


@pytest.fixture(scope="package")
def package_hub(sim, tmp_path_factory):
    child = start_web_hub(tmp_path_factory.mktemp("hub"), sim)
    yield child
    child.stop(grace=60)


@pytest.fixture(scope="module")
def hub(package_hub):
    """The package's hub as new for each module: a module's is as started, or as reset."""
    if package_hub.info.get("used"):
        reset(package_hub)
    package_hub.info["used"] = True
    return package_hub


def reset(hub) -> None:
    """Every server stopped, then, once the service has run a whole cycle without them, its
    store emptied."""
    loop = asyncio.new_event_loop()  # a loop of its own: a sync fixture runs outside the modules' loops
    try:
        loop.run_until_complete(stop_all_servers(hub))
    finally:
        loop.close()
    start = cycles(hub)
    deadline = time.monotonic() + 60
    while cycles(hub) < start + 2:  # a cycle in flight, then one begun after the stops
        if time.monotonic() > deadline:
            raise AssertionError("the service ran no two cycles in 60 s")
        time.sleep(0.5)
    empty_store(hub.info["store"])


async def stop_all_servers(hub) -> None:
    async with HubAPI.of(hub):  # stops every server on the way out
        pass


def empty_store(url: str) -> None:
    """Every row of every table but the schema's version."""
    with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30) as conn:
        tables = [name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")
                  if name != "schema_version" and not name.startswith("sqlite_")]
        for name in tables:
            conn.execute(f'delete from "{name}"')
