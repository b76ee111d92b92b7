"""What the live kernel-probe credential tests share (tests/service/test_probe_credentials.py):
the hook mallory puts in her server's config, what it recorded, and the probe tokens the hub
lists."""

from __future__ import annotations

import json

import aiohttp

from jupyterhub_gpu_reclaim.signals.probe_token_client import PROBE_NOTE

from .hubapi import HubAPI

HOSTILE_CONFIG = '''
# records what every request to this server carries
import json, os

def _record(handler):
    r = handler.request
    with open(os.path.expanduser("~/captured.jsonl"), "a") as f:
        f.write(json.dumps({"method": r.method, "uri": r.uri, "status": handler.get_status(),
                            "authorization": r.headers.get("Authorization"),
                            "cookie": r.headers.get("Cookie")}) + "\\n")

c.ServerApp.tornado_settings = {"log_function": _record}
'''


async def captured(api: HubAPI) -> list[dict]:
    """What mallory's server recorded (read as the tests' service, whose requests it records too)."""
    url = f"{api.url}/user/mallory/api/contents/captured.jsonl?content=1&format=text"
    async with api.session.get(url) as r:
        if r.status == 404:
            return []
        assert r.status == 200, await r.text()
        text = (await r.json())["content"]
    return [json.loads(line) for line in text.splitlines()]


def probe_tokens(records: list[dict], tests_token: str) -> set[str]:
    """The tokens of every recorded request that the tests' service did not make."""
    return {r["authorization"].split(" ", 1)[1] for r in records
            if r["authorization"] and r["authorization"] != f"token {tests_token}"}


async def listed_probe_tokens(api: HubAPI, user: str) -> list[dict]:
    return [t for t in (await api.request("GET", f"/users/{user}/tokens"))["api_tokens"]
            if t["note"] == PROBE_NOTE]


async def token_gone(api: HubAPI, user: str, token_id: str) -> bool:
    return token_id not in {t["id"] for t in await listed_probe_tokens(api, user)}


async def none_left(api: HubAPI, user: str) -> bool:
    return await listed_probe_tokens(api, user) == []


async def some_left(api: HubAPI, user: str) -> bool:
    return bool(await listed_probe_tokens(api, user))


async def post_probe_token(api: HubAPI, token: str, user: str, body: dict) -> tuple[int, dict]:
    """A mint at the probe-token API with `token` (the service's, as whoever read it would)."""
    async with aiohttp.ClientSession(headers={"Authorization": f"token {token}"}) as stolen:
        async with stolen.post(f"{api.api}/gpu-reclaim/users/{user}/tokens", json=body) as r:
            return r.status, await r.json()
