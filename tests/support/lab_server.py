"""A real jupyter-server from this environment, as a user image runs it (it loads
jupyterhub_gpu_reclaim_lab, installed there), on loopback with a token, no hub: the lab
package's tests drive it (its kernels, its stop, its `gpu-reclaim/…` handlers)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Mapping

import aiohttp

from gpu_reclaim_sim.launch import free_port
from jupyterhub_gpu_reclaim_lab.stopping import GRACE_ENV


class Server:
    """jupyter-server from this environment (it loads jupyterhub_gpu_reclaim_lab as the user
    image does), HOME in `home`, `grace` in its environment (None: unset), and `env` (what the
    hub's spawner would set: the server's user and token, the service's URL)."""

    def __init__(self, home: Path, grace: str | None, args: tuple[str, ...] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.home, self.port, self.token = home, free_port(), uuid.uuid4().hex
        environ = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        environ.update(HOME=str(home), **({GRACE_ENV: grace} if grace is not None else {}), **(env or {}))
        self.log = home.parent / f"{home.name}-server.log"
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("jupyter-server")), "--no-browser", "--allow-root",
             f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={home}", *args], env=environ, cwd=home, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.http = aiohttp.ClientSession(headers={"Authorization": f"token {self.token}"})

    async def ready(self) -> None:
        for _ in range(300):
            try:
                async with self.http.get(f"{self.url}/status") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"jupyter-server did not start: {self.log.read_text()[-3000:]}")

    async def kernel(self, code: str) -> tuple[str, str]:
        """A new kernel that ran `code`: its id and stdout."""
        async with self.http.post(f"{self.url}/kernels", json={"name": "python3"}) as r:
            assert r.status == 201, await r.text()
            kernel_id = (await r.json())["id"]
        msg_id = uuid.uuid4().hex
        out = []
        async with self.http.ws_connect(f"ws://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels") as ws:
            await ws.send_str(json.dumps({
                "header": {"msg_id": msg_id, "username": "t", "session": uuid.uuid4().hex,
                           "msg_type": "execute_request", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            async for frame in ws:
                msg = json.loads(frame.data)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "error":
                    raise AssertionError("\n".join(msg["content"]["traceback"]))
                if kind == "stream":
                    out.append(msg["content"]["text"])
                if kind == "status" and msg["content"]["execution_state"] == "idle":
                    return kernel_id, "".join(out)
        raise AssertionError("the kernel's channel closed")

    async def shut_down_kernel(self, kernel_id: str) -> None:
        async with self.http.delete(f"{self.url}/kernels/{kernel_id}") as r:
            assert r.status == 204, await r.text()

    async def sigterm(self) -> float:
        """SIGTERM, as the kubelet sends it; seconds until the server exited."""
        await self.http.close()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self.proc.wait, 120)
        return time.monotonic() - t0

    async def close(self) -> None:
        await self.http.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
