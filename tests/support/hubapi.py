"""A small client of JupyterHub's REST API and of a user's Jupyter server, for tests."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import aiohttp


class HubAPI:
    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.api = self.url + "/hub/api"
        self.headers = {"Authorization": f"token {token}"}
        self.session = aiohttp.ClientSession(headers=self.headers)

    @classmethod
    def of(cls, hub) -> "HubAPI":
        """A client of a hub started by the harness, as the tests' service."""
        return cls(hub.info["url"], hub.info["token"])

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> "HubAPI":
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stops every server the tests started, then closes."""
        try:
            await self.stop_all_servers()
        finally:
            await self.close()

    async def request(self, method: str, path: str, body: Any = None, ok=(200, 201, 202, 204)) -> Any:
        async with self.session.request(method, self.api + path, json=body) as r:
            text = await r.text()
            if r.status not in ok:
                raise AssertionError(f"{method} {path}: {r.status} {text}")
            return json.loads(text) if text else None

    async def user(self, name: str) -> dict:
        return await self.request("GET", f"/users/{name}")

    async def ensure_user(self, name: str) -> dict:
        async with self.session.get(f"{self.api}/users/{name}") as r:
            if r.status == 200:
                return await r.json()
        return await self.request("POST", f"/users/{name}")

    async def start(self, name: str, profile: str | None = None) -> None:
        await self.ensure_user(name)
        await self.request("POST", f"/users/{name}/server", {"profile": profile} if profile else {})

    async def server(self, name: str) -> dict | None:
        return (await self.user(name))["servers"].get("")

    async def wait_ready(self, name: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = await self.server(name)
            if server and server["ready"]:
                return server
            if server is None:
                raise AssertionError(f"{name}'s server went away while starting")
            await asyncio.sleep(0.5)
        raise AssertionError(f"{name}'s server not ready after {timeout} s: {await self.server(name)}")

    async def progress(self, name: str, timeout: float = 120) -> list[dict]:
        """The spawn-progress event stream (what the spawn page shows), until it ends."""
        events = []
        url = f"{self.api}/users/{name}/server/progress"
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            assert r.status == 200, await r.text()
            async for line in r.content:
                line = line.strip()
                if line.startswith(b"data:"):
                    event = json.loads(line[5:])
                    events.append(event)
                    if event.get("ready") or event.get("failed"):
                        break
        return events

    async def stop(self, name: str, timeout: float = 60) -> None:
        await self.request("DELETE", f"/users/{name}/server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.server(name) is None:
                return
            await asyncio.sleep(0.3)
        raise AssertionError(f"{name}'s server did not stop in {timeout} s")

    async def stop_all_servers(self) -> None:
        """Stops every user's server, all at once (each stop waits for its pod to go)."""
        await asyncio.gather(*(self.stop(user["name"]) for user in await self.request("GET", "/users")
                               if user["servers"]))

    # --- the user's own server ------------------------------------------------------

    async def run_code(self, name: str, code: str, timeout: float = 60, keep_kernel: bool = False) -> str:
        """Execute `code` in a new kernel on the user's server; its stdout. The kernel is shut
        down after, unless `keep_kernel` (it then runs until the server stops)."""
        base = f"{self.url}/user/{name}/api"
        async with self.session.post(f"{base}/kernels", json={"name": "python3"}) as r:
            assert r.status == 201, f"POST kernels: {r.status} {(await r.text())[:2000]}"
            kernel = await r.json()
        try:
            return await asyncio.wait_for(self._execute(f"{base}/kernels/{kernel['id']}/channels", code), timeout)
        finally:
            if not keep_kernel:
                async with self.session.delete(f"{base}/kernels/{kernel['id']}"):
                    pass

    async def _execute(self, url: str, code: str) -> str:
        msg_id = uuid.uuid4().hex
        message = {
            "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }
        out: list[str] = []
        async with self.session.ws_connect(url.replace("http", "ws", 1)) as ws:
            await ws.send_str(json.dumps(message))
            async for frame in ws:
                msg = json.loads(frame.data)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "stream":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    raise AssertionError("kernel error: " + "\n".join(msg["content"]["traceback"]))
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    break
        return "".join(out)


class StaticProbeToken:
    """Kernel-probe credentials that give one fixed token for every server: for tests that
    probe as the tests' own service. The service never does (it mints a token per server
    owned by its user: signals/probe_token_client.py)."""

    def __init__(self, token: str) -> None:
        self.value = token
        self.rejected_tokens: list[str] = []

    async def token(self, user: str, server: str) -> str:
        return self.value

    async def rejected(self, user: str, server: str, token: str) -> None:
        self.rejected_tokens.append(token)
